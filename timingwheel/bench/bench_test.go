package bench

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// Benchmarks pre-fill a million entries. The framework calls each benchmark
// first with b.N = 1 and then with the real b.N; the filled fixture of the
// first call is kept for the second so a fill is paid once per sample.
var fixtures = map[string]scheduler{}

func fixture(b *testing.B, build func() scheduler) scheduler {
	name := b.Name()
	for n, f := range fixtures { // a fixture from another benchmark is stale
		if n != name {
			f.close()
			delete(fixtures, n)
		}
	}
	if f, ok := fixtures[name]; ok {
		delete(fixtures, name)
		if b.N != 1 {
			b.Cleanup(f.close)
			return f
		}
		f.close()
	}
	f := build()
	if b.N == 1 {
		fixtures[name] = f
	} else {
		b.Cleanup(f.close)
	}
	return f
}

// once runs an expensive b.N-independent measurement once per sample: it is
// computed on the b.N = 1 call and reused by the call that follows.
var onceResults = map[string]map[string]float64{}

func once(b *testing.B, measure func() map[string]float64) {
	name := b.Name()
	res, ok := onceResults[name]
	delete(onceResults, name)
	if b.N == 1 || !ok {
		res = measure()
		if b.N == 1 {
			onceResults[name] = res
		}
	}
	for unit, v := range res {
		b.ReportMetric(v, unit)
	}
	b.ReportMetric(0, "ns/op")
}

// owner is a scheduler that also takes the owner's clock reading and a
// delay from it, as the bridge has for a record (its origin and offset).
type owner interface {
	addAfter(k int, now time.Time, d time.Duration)
}

// ownerClockEvery is how many adds share one clock reading in the
// owner-style schedule run (impl=wheel-owner).
const ownerClockEvery = 64

// BenchmarkSchedule measures adds with 1M pending. impl=wheel adds each
// entry at its delay after time.Now() (AddAfter), one clock read per add as
// AfterFunc does internally. impl=wheel-owner measures the wheel as the
// bridge uses it: AddAfter(id, base, delay), with base read from the clock
// once every ownerClockEvery adds.
func BenchmarkSchedule(b *testing.B) {
	type variant struct {
		name  string
		make  func() scheduler
		owner bool
	}
	var variants []variant
	for _, impl := range impls {
		variants = append(variants, variant{impl.name, impl.make, false})
		if impl.name == "wheel" {
			variants = append(variants, variant{"wheel-owner", impl.make, true})
		}
	}
	for _, impl := range variants {
		for _, d := range dists {
			b.Run("impl="+impl.name+"/dist="+d.name, func(b *testing.B) {
				if b.N > extra {
					b.Fatalf("b.N %d > %d spare ids: use -benchtime=%dx or less", b.N, extra, extra)
				}
				s := fixture(b, func() scheduler {
					s := impl.make()
					fill(s, d, 1)
					return s
				})
				r := rand.New(rand.NewPCG(2, 2))
				delays := make([]time.Duration, b.N)
				for i := range delays {
					delays[i] = d.delay(r)
				}
				base := pending
				if b.N == 1 {
					base = pending + extra - 1 // keep the ids of the main run unused
				}
				runtime.GC() // no GC cycle of the setup's garbage runs into the timed part
				b.ResetTimer()
				if impl.owner {
					o := s.(owner)
					var now time.Time
					for i := range b.N {
						if i%ownerClockEvery == 0 {
							now = time.Now()
						}
						o.addAfter(base+i, now, delays[i])
					}
					return
				}
				for i := range b.N {
					s.add(base+i, delays[i])
				}
			})
		}
	}
}

func BenchmarkCancel(b *testing.B) {
	type variant struct {
		name     string
		make     func() scheduler
		byHandle bool
		owner    bool // what the victims' caller holds is copied into a small batch first
	}
	variants := []variant{
		{"wheel/by=id", func() scheduler { return newWheel() }, false, false},
		{"wheel/by=id-owner", func() scheduler { return newWheel() }, false, true},
		{"wheel/by=handle", func() scheduler { return newWheel() }, true, false},
		{"afterfunc/by=handle", func() scheduler { return newAfterFunc(false) }, true, false},
		{"afterfunc/by=handle-owner", func() scheduler { return newAfterFunc(false) }, true, true},
		{"afterfunc/by=id", func() scheduler { return newAfterFunc(true) }, false, false},
		{"heap/by=id", func() scheduler { return newHeap() }, false, false},
		{"gozero/by=id", func() scheduler { return newGoZero(nil) }, false, false},
	}
	for _, v := range variants {
		for _, d := range dists {
			b.Run("impl="+v.name+"/dist="+d.name, func(b *testing.B) {
				s := fixture(b, func() scheduler {
					s := v.make()
					fill(s, d, 1)
					return s
				})
				r := rand.New(rand.NewPCG(3, uint64(b.N)))
				const batch = 1024
				victims := make([]int, 0, batch)
				runtime.GC() // no GC cycle of the setup's garbage runs into the timed part
				b.ResetTimer()
				b.StopTimer()
				for i := 0; i < b.N; i += batch {
					// Random older entries, distinct within a batch.
					victims = victims[:0]
					for len(victims) < min(batch, b.N-i) {
						k := r.IntN(pending)
						if !slices.Contains(victims, k) {
							victims = append(victims, k)
						}
					}
					switch {
					case v.owner:
						// Owner-style: the caller holds a fresh copy of each
						// id (as the bridge parses one from a message) or the
						// handle, in a small batch in cache; not timed.
						oc := s.(ownerCanceler)
						oc.prepare(victims)
						b.StartTimer()
						for j := range victims {
							oc.cancelPrepared(j)
						}
					case v.byHandle:
						hc := s.(handleCanceler)
						b.StartTimer()
						for _, k := range victims {
							hc.cancelHandle(k)
						}
					default:
						b.StartTimer()
						for _, k := range victims {
							s.cancel(k)
						}
					}
					b.StopTimer()
					for _, k := range victims { // re-add to keep the size
						s.add(k, d.delay(r))
					}
				}
			})
		}
	}
}

// BenchmarkRandomRead is the machine's yardstick for the cancel figures: one
// dependent read of a random cache line in a 96 MB buffer (a chain through a
// random cyclic permutation of its lines), the memory latency, TLB walk
// included, that a cancel of a random older entry pays once for its node
// (and AfterFunc's Stop for its timer) whatever the code around it. Run
// right after Cancel, so both see the same stretch of the machine.
func BenchmarkRandomRead(b *testing.B) {
	chain := randomChain()
	b.ResetTimer()
	i := uint32(0)
	for range b.N {
		i = chain[i*lineWords]
	}
	readSink = i // the chain's end, so the reads are not dead code
}

var readSink uint32

const (
	lineWords  = 16 // uint32s per 64-byte line
	chainLines = 96 << 20 / 64
)

var randomChain = sync.OnceValue(func() []uint32 {
	// Sattolo's algorithm: a random permutation that is a single cycle, so
	// the chain visits every line before it repeats.
	next := make([]uint32, chainLines)
	for k := range next {
		next[k] = uint32(k)
	}
	r := rand.New(rand.NewPCG(9, 9))
	for k := len(next) - 1; k > 0; k-- {
		j := r.IntN(k)
		next[k], next[j] = next[j], next[k]
	}
	chain := make([]uint32, chainLines*lineWords)
	for k, n := range next {
		chain[k*lineWords] = n
	}
	return chain
})
