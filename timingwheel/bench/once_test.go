package bench

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axbridge/axbridge/timingwheel"
)

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkMemory reports heap bytes per pending entry after filling a
// million (B/entry). The ids are allocated up front, so the id strings the
// caller holds are not counted. The wheel keeps its own copy of each id's
// bytes in its nodes, which B/entry does count; idB/entry is their average
// length, so B/entry minus idB/entry is the wheel's memory without the id
// string's own bytes. The other implementations keep the caller's strings
// (idB/entry 0).
func BenchmarkMemory(b *testing.B) {
	idBytes := 0
	for _, id := range ids[:pending] {
		idBytes += len(id)
	}
	for _, impl := range impls {
		for _, d := range dists {
			b.Run("impl="+impl.name+"/dist="+d.name, func(b *testing.B) {
				once(b, func() map[string]float64 {
					before := heapAlloc()
					s := impl.make()
					fill(s, d, 1)
					after := heapAlloc()
					runtime.KeepAlive(s)
					s.close()
					own := 0.0
					if impl.name == "wheel" {
						own = float64(idBytes) / pending
					}
					return map[string]float64{
						"B/entry":   float64(int64(after)-int64(before)) / pending,
						"idB/entry": own,
					}
				})
			})
		}
	}
}

const burst = 500_000

// BenchmarkHandoff reports the cost per fired entry when 500k entries fall due
// at the same instant: for the wheel and the heap, the time Advance takes; for
// AfterFunc and go-zero, the time from the due instant until the last callback
// ran.
func BenchmarkHandoff(b *testing.B) {
	sync := func(add func(k int, due time.Time), advance func(now time.Time, fire func())) func() map[string]float64 {
		return func() map[string]float64 {
			due := time.Now().Add(2 * time.Second) // within the wheel's horizon
			for k := range burst {
				add(k, due)
			}
			fired := 0
			runtime.GC()
			start := time.Now()
			advance(due, func() { fired++ })
			el := time.Since(start)
			if fired != burst {
				b.Fatalf("fired %d of %d", fired, burst)
			}
			return map[string]float64{"ns/fired": float64(el.Nanoseconds()) / burst}
		}
	}
	async := func(lead time.Duration, add func(k int, delay time.Duration, done func()), stop func()) func() map[string]float64 {
		return func() map[string]float64 {
			var n atomic.Int64
			all := make(chan time.Time, 1)
			done := func() {
				if n.Add(1) == burst {
					all <- time.Now()
				}
			}
			due := time.Now().Add(lead)
			for k := range burst {
				add(k, time.Until(due), done)
			}
			if time.Now().After(due) {
				b.Fatalf("scheduling %d took longer than %v", burst, lead)
			}
			runtime.GC()
			last := <-all
			stop()
			return map[string]float64{"ns/fired": float64(last.Sub(due).Nanoseconds()) / burst}
		}
	}
	b.Run("impl=wheel", func(b *testing.B) {
		var w *timingwheel.Wheel[uint32]
		once(b, sync(func(k int, due time.Time) {
			if w == nil {
				w = timingwheel.New[uint32](time.Now(), timingwheel.Options{})
			}
			w.Add(ids[k], due, uint32(k))
		}, func(now time.Time, fire func()) {
			w.Advance(now, func(string, time.Time, uint32) { fire() })
		}))
	})
	b.Run("impl=heap", func(b *testing.B) {
		s := newHeap()
		once(b, sync(func(k int, due time.Time) {
			s.addAt(k, due)
		}, func(now time.Time, fire func()) {
			s.advance(now, func(string, time.Time, uint32) { fire() })
		}))
	})
	b.Run("impl=afterfunc", func(b *testing.B) {
		once(b, async(time.Second, func(k int, delay time.Duration, done func()) {
			time.AfterFunc(delay, done)
		}, func() {}))
	})
	b.Run("impl=gozero", func(b *testing.B) {
		var s *goZeroSched
		var done func()
		once(b, async(3*time.Second, func(k int, delay time.Duration, d func()) {
			if s == nil {
				done = d
				s = newGoZero(func(key, value any) { done() })
			}
			s.add(k, delay)
		}, func() { s.close() }))
	})
}

const probes = 100_000

// latency summarises lateness samples in milliseconds.
func latency(late []time.Duration, early int) map[string]float64 {
	slices.Sort(late)
	at := func(q float64) float64 {
		return float64(late[int(q*float64(len(late)-1))]) / float64(time.Millisecond)
	}
	return map[string]float64{"p50-ms": at(0.5), "p99-ms": at(0.99), "max-ms": at(1), "early": float64(early)}
}

// BenchmarkLateness schedules 100k probes due over the next two seconds while a
// million entries (uniform 1s–5m) are pending, and measures how late each
// fires. The wheel and the heap run the bridge's owner loop: one goroutine,
// one time.Timer armed to Next.
func BenchmarkLateness(b *testing.B) {
	probeDelays := func(start time.Time) []time.Time {
		r := rand.New(rand.NewPCG(4, 4))
		due := make([]time.Time, probes)
		for i := range due {
			due[i] = start.Add(200*time.Millisecond + time.Duration(r.Int64N(int64(2*time.Second))))
		}
		return due
	}
	type owned interface {
		scheduler
		addAt(k int, due time.Time)
		next() (time.Time, bool)
		advance(now time.Time, fire func(k int, due time.Time))
	}
	ownerLoop := func(s owned) map[string]float64 {
		fill(s, dists[1], 5)
		due := probeDelays(time.Now())
		for i, t := range due {
			s.addAt(pending+i, t)
		}
		late := make([]time.Duration, 0, probes)
		early := 0
		timer := time.NewTimer(time.Hour)
		defer timer.Stop()
		for len(late) < probes {
			if next, ok := s.next(); ok {
				timer.Reset(time.Until(next))
			}
			<-timer.C
			s.advance(time.Now(), func(k int, due time.Time) {
				if k < pending {
					return // a background entry
				}
				now := time.Now()
				if now.Before(due) {
					early++
				}
				late = append(late, now.Sub(due))
			})
		}
		s.close()
		return latency(late, early)
	}
	b.Run("impl=wheel", func(b *testing.B) {
		once(b, func() map[string]float64 { return ownerLoop(&ownedWheel{newWheel()}) })
	})
	b.Run("impl=heap", func(b *testing.B) {
		once(b, func() map[string]float64 { return ownerLoop(&ownedHeap{newHeap()}) })
	})
	b.Run("impl=afterfunc", func(b *testing.B) {
		once(b, func() map[string]float64 {
			s := newAfterFunc(false)
			fill(s, dists[1], 5)
			due := probeDelays(time.Now())
			late := make([]time.Duration, probes)
			var early, n atomic.Int64
			all := make(chan struct{})
			for i, t := range due {
				time.AfterFunc(time.Until(t), func() {
					now := time.Now()
					if now.Before(t) {
						early.Add(1)
					}
					late[i] = now.Sub(t)
					if n.Add(1) == probes {
						close(all)
					}
				})
			}
			<-all
			s.close()
			return latency(late, int(early.Load()))
		})
	})
	b.Run("impl=gozero", func(b *testing.B) {
		once(b, func() map[string]float64 {
			late := make([]time.Duration, probes)
			var due []time.Time
			var early, n atomic.Int64
			all := make(chan struct{})
			s := newGoZero(func(key, value any) {
				k := int(value.(uint32))
				if k < pending {
					return
				}
				i := k - pending
				now := time.Now()
				if now.Before(due[i]) {
					early.Add(1)
				}
				late[i] = now.Sub(due[i])
				if n.Add(1) == probes {
					close(all)
				}
			})
			fill(s, dists[1], 5)
			due = probeDelays(time.Now())
			for i, t := range due {
				s.add(pending+i, max(time.Until(t), time.Nanosecond)) // go-zero rejects delay <= 0
			}
			<-all
			s.close()
			return latency(late, int(early.Load()))
		})
	})
}

type ownedWheel struct{ *wheelSched }

func (o *ownedWheel) addAt(k int, due time.Time) { o.w.Add(ids[k], due, uint32(k)) }
func (o *ownedWheel) next() (time.Time, bool)    { return o.w.Next() }
func (o *ownedWheel) advance(now time.Time, fire func(k int, due time.Time)) {
	o.w.Advance(now, func(_ string, due time.Time, v uint32) { fire(int(v), due) })
}

type ownedHeap struct{ *heapSched }

func (o *ownedHeap) advance(now time.Time, fire func(k int, due time.Time)) {
	o.heapSched.advance(now, func(_ string, due time.Time, v uint32) { fire(int(v), due) })
}

// BenchmarkStall advances a wheel holding 1M entries (uniform 1s–5m) one tick
// at a time over 10 s of synthetic time, crossing two level-1 slot
// boundaries, and reports the p99 and the longest single Advance in
// microseconds: the stall an owner loop would see.
func BenchmarkStall(b *testing.B) {
	once(b, func() map[string]float64 {
		start := time.Now()
		w := timingwheel.New[uint32](start, timingwheel.Options{})
		r := rand.New(rand.NewPCG(6, 6))
		for k := range pending {
			w.Add(ids[k], start.Add(dists[1].delay(r)), uint32(k))
		}
		runtime.GC()
		took := make([]time.Duration, 0, 10_000)
		for t := time.Millisecond; t <= 10*time.Second; t += time.Millisecond {
			t0 := time.Now()
			w.Advance(start.Add(t), func(string, time.Time, uint32) {})
			took = append(took, time.Since(t0))
		}
		slices.Sort(took)
		us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
		return map[string]float64{"p99-us": us(took[len(took)*99/100]), "max-us": us(took[len(took)-1])}
	})
}

// BenchmarkGrowth adds entries one at a time (uniform 1s-5m) until the index
// has grown past 1.57M, where its table doubles and entries start moving to
// the new one, and reports the slowest single Add (`max-ms`): the stall an
// owner's loop sees when the wheel grows. Wheel only; no sleeping.
func BenchmarkGrowth(b *testing.B) {
	once(b, func() map[string]float64 {
		const n = 1_600_000 // past the growth at 3/4 of 2^21 positions
		more := make([]string, n-len(ids))
		for k := range more {
			more[k] = "task-" + strconv.Itoa(len(ids)+k) + "-0123456789"
		}
		start := time.Now()
		w := timingwheel.New[uint32](start, timingwheel.Options{})
		r := rand.New(rand.NewPCG(7, 7))
		runtime.GC()
		var worst time.Duration
		for k := range n {
			id := ""
			if k < len(ids) {
				id = ids[k]
			} else {
				id = more[k-len(ids)]
			}
			due := start.Add(dists[1].delay(r))
			t0 := time.Now()
			w.Add(id, due, uint32(k))
			worst = max(worst, time.Since(t0))
		}
		return map[string]float64{"max-ms": float64(worst) / float64(time.Millisecond)}
	})
}

// BenchmarkChurn runs the wheel in a steady state on synthetic time: 1M
// pending (uniform 1s-5m), then 20 simulated minutes in 1ms steps, each step
// adding 7 entries (uniform 1s-5m, about the rate at which 1M such entries
// fall due) and calling Advance: 8.4M adds, 8.3M fires. Tombstones build up
// in the index meanwhile, and it moves to a new table at least once.
// Reported: the slowest single Add and Advance (`max-add-ms`,
// `max-advance-ms`) and how many Advances took over 5ms (`over5ms`): the
// stalls an owner's loop sees in steady operation. Wheel only; no sleeping.
func BenchmarkChurn(b *testing.B) {
	once(b, func() map[string]float64 {
		start := time.Unix(1000, 0)
		w := timingwheel.New[uint32](start, timingwheel.Options{})
		r := rand.New(rand.NewPCG(9, 9))
		delay := func() time.Duration { return dists[1].delay(r) }
		for k := range pending {
			w.Add(ids[k], start.Add(delay()), uint32(k))
		}
		w.Len()
		runtime.GC()
		var worstAdd, worstAdv time.Duration
		slow, fired, k := 0, 0, 0
		batch := make([]string, 7)
		for step := 1; step <= 20*60*1000; step++ {
			now := start.Add(time.Duration(step) * time.Millisecond)
			for j := range batch { // not timed
				batch[j] = "churn-" + strconv.Itoa(k) + "-0123456789"
				k++
			}
			for _, id := range batch {
				due := now.Add(delay())
				t0 := time.Now()
				w.Add(id, due, 0)
				worstAdd = max(worstAdd, time.Since(t0))
			}
			t0 := time.Now()
			w.Advance(now, func(string, time.Time, uint32) { fired++ })
			d := time.Since(t0)
			worstAdv = max(worstAdv, d)
			if d > 5*time.Millisecond {
				slow++
			}
		}
		if fired+w.Len() != pending+k {
			b.Fatalf("fired %d, pending %d, added %d", fired, w.Len(), pending+k)
		}
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		return map[string]float64{"max-add-ms": ms(worstAdd), "max-advance-ms": ms(worstAdv), "over5ms": float64(slow)}
	})
}
