package bench

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"
)

// pair holds the wheel and AfterFunc fixtures of BenchmarkPaired, filled
// with the same delays.
type pair struct {
	w *wheelSched
	a *afterFuncSched
	// For op=steady: the ids pending on both sides, and the ids not pending.
	live []int
	free []int
}

func (p *pair) add(k int, d time.Duration) { p.w.add(k, d); p.a.add(k, d) }
func (p *pair) cancel(k int)               { p.w.cancel(k); p.a.cancelHandle(k) }
func (p *pair) close()                     { p.w.close(); p.a.close() }

// pairedBatch is how many operations one side runs before the other takes
// its turn.
const pairedBatch = 1024

// BenchmarkPaired measures the two targets set as ratios to AfterFunc,
// schedule and cancel, with both sides in the same time window. Both hold
// 1M pending entries at once; batches of 1024 operations alternate between
// the wheel and AfterFunc (which side goes first alternates too), and each
// batch is timed on its own. Drift of the machine over seconds or minutes,
// which Schedule and Cancel see as a difference between two benchmarks run
// a minute apart, falls on both sides alike here.
//
//   - op=schedule: the wheel as its owner adds (AddAfter, one clock read per
//     64 adds, as impl=wheel-owner, each id a fresh copy) against
//     time.AfterFunc;
//   - op=cancel: the wheel's Remove by id, the caller holding a fresh copy of
//     the id (as by=id-owner), against Timer.Stop of a random older timer
//     (as afterfunc/by=handle); cancelled entries are re-added, untimed;
//   - op=steady: op=schedule in a steady state. Before the sample, 3.2M
//     cancels of random pending entries, each followed by an add, run on
//     both sides (untimed), so that AfterFunc's timer heap has reached the
//     capacity this churn needs and the wheel reuses the nodes of cancelled
//     entries (its sweep frees them once they outnumber the pending ones);
//     then each timed batch of 1024 adds is followed by 1024 such cancels,
//     untimed, keeping 1M pending. A sample times at least steadyMin adds,
//     whatever b.N. The wheel does not grow while it is timed; AfterFunc's
//     heap sometimes still does in the first sample of a run (its page
//     faults show it).
//
// Reported: wheel-ns/op and afterfunc-ns/op (each side's mean over the
// sample) and ratio, their quotient; wheel-faults/op and afterfunc-faults/op,
// the minor page faults (first touches of memory the kernel had not backed
// yet) per operation of each side, which on a virtual machine cost a few
// microseconds each. ns/op is 0: it would mix the two.
func BenchmarkPaired(b *testing.B) {
	for _, op := range []string{"schedule", "cancel", "steady"} {
		for _, d := range dists {
			b.Run("op="+op+"/dist="+d.name, func(b *testing.B) {
				if op == "schedule" && b.N > extra {
					b.Fatalf("b.N %d > %d spare ids: use -benchtime=%dx or less", b.N, extra, extra)
				}
				p := fixture(b, func() scheduler {
					p := &pair{w: newWheel(), a: newAfterFunc(false)}
					fill(p, d, 1)
					if op == "steady" {
						p.churnSetup(d)
					}
					return p
				}).(*pair)
				b.StopTimer()
				var w, a side
				n := b.N
				switch op {
				case "schedule":
					w, a = pairedSchedule(b.N, p, d)
				case "cancel":
					w, a = pairedCancel(b.N, p, d)
				default:
					n = steadyAdds(b.N)
					w, a = pairedSteady(n, p, d)
				}
				ops := float64(n)
				b.ReportMetric(float64(w.took.Nanoseconds())/ops, "wheel-ns/op")
				b.ReportMetric(float64(a.took.Nanoseconds())/ops, "afterfunc-ns/op")
				b.ReportMetric(float64(w.took)/float64(a.took), "ratio")
				b.ReportMetric(float64(w.faults)/ops, "wheel-faults/op")
				b.ReportMetric(float64(a.faults)/ops, "afterfunc-faults/op")
				b.ReportMetric(float64(w.worst.Microseconds()), "wheel-maxbatch-us")
				b.ReportMetric(float64(a.worst.Microseconds()), "afterfunc-maxbatch-us")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// side is what one side's timed batches took, the slowest of them, and the
// page faults in them.
type side struct {
	took   time.Duration
	worst  time.Duration
	faults int64
}

// timed runs f and adds its time and page faults to s.
func (s *side) timed(f func()) {
	f0 := minorFaults()
	t0 := time.Now()
	f()
	el := time.Since(t0)
	s.took += el
	s.worst = max(s.worst, el)
	s.faults += minorFaults() - f0
}

// alternate times one batch of each side, the wheel first on even turns.
func alternate(turn int, w, a *side, wheel, after func()) {
	if turn%2 == 0 {
		w.timed(wheel)
		a.timed(after)
		return
	}
	a.timed(after)
	w.timed(wheel)
}

// pairedSchedule adds n new entries to each side and returns what each took.
func pairedSchedule(n int, p *pair, d dist) (w, a side) {
	r := rand.New(rand.NewPCG(2, 2))
	delays := make([]time.Duration, n)
	for i := range delays {
		delays[i] = d.delay(r)
	}
	base := pending
	if n == 1 {
		base = pending + extra - 1 // keep the ids of the main run unused
	}
	batch := make([]int, 0, pairedBatch)
	runtime.GC() // no GC cycle of the setup's garbage runs into the timed part
	for lo, turn := 0, 0; lo < n; lo, turn = lo+pairedBatch, turn+1 {
		hi := min(lo+pairedBatch, n)
		batch = batch[:0]
		for i := lo; i < hi; i++ {
			batch = append(batch, base+i)
		}
		p.addBatch(turn, &w, &a, batch, delays[lo:hi])
	}
	return w, a
}

// addBatch adds the ids ks (k-th due delays[k] from now) to each side, each
// side timed on its own, the wheel as its owner adds: AddAfter with one
// clock read per ownerClockEvery adds (like AfterFunc it takes the delay,
// not a due time the caller computes), and ids the caller has just made
// (fresh copies, untimed, as the bridge adds the id of a record it has just
// decoded).
// Reading ids[k] instead, the wheel would also pay for two cache misses
// per add when op=steady takes the ids of random cancelled entries (the
// string header, then its bytes), which AfterFunc, taking no id, never
// reads: measured 140-320 ns per add against 96-111 with fresh copies.
// Likewise AfterFunc's side keeps each new timer where the caller would, in
// a record it has just made (a small batch, copied into p.a.timers[k]
// untimed), not in p.a.timers[k] for random k, a cold line per add.
func (p *pair) addBatch(turn int, w, a *side, ks []int, delays []time.Duration) {
	p.w.prepare(ks)
	wheel := func() {
		var now time.Time
		for j, k := range ks {
			if j%ownerClockEvery == 0 {
				now = time.Now()
			}
			p.w.w.AddAfter(p.w.batch[j], now, delays[j], uint32(k))
		}
	}
	p.a.batch = slices.Grow(p.a.batch[:0], len(ks))[:len(ks)]
	after := func() {
		for j, k := range ks {
			p.a.batch[j] = p.a.start(k, delays[j])
		}
	}
	alternate(turn, w, a, wheel, after)
	for j, k := range ks {
		p.a.timers[k] = p.a.batch[j]
	}
}

// pairedCancel cancels n random older entries on each side, re-adding them
// untimed, and returns what the cancels took on each side.
func pairedCancel(n int, p *pair, d dist) (w, a side) {
	r := rand.New(rand.NewPCG(3, uint64(n)))
	victims := make([]int, 0, pairedBatch)
	wheel := func() {
		for j := range victims {
			p.w.cancelPrepared(j)
		}
	}
	after := func() {
		for _, k := range victims {
			p.a.cancelHandle(k)
		}
	}
	runtime.GC() // as in pairedSchedule
	for i, turn := 0, 0; i < n; i, turn = i+pairedBatch, turn+1 {
		victims = victims[:0]
		for len(victims) < min(pairedBatch, n-i) {
			k := r.IntN(pending)
			if !slices.Contains(victims, k) {
				victims = append(victims, k)
			}
		}
		p.w.prepare(victims) // fresh copies of the ids, as the owner holds them
		alternate(turn, &w, &a, wheel, after)
		for _, k := range victims {
			p.add(k, d.delay(r))
		}
	}
	return w, a
}

// steadyWarmup is how many cancel-and-add steps run on both sides before an
// op=steady sample: more than the 1M pending, so the wheel's sweep of
// cancelled entries has started, and enough for AfterFunc's cost to settle.
// After 1.2M steps AfterFunc's adds took about 205 ns (median of six samples),
// after 3.2M and after 6.2M about 182, with the wheel's unchanged.
const steadyWarmup = 3_200_000

// churnSetup makes p's pending ids [0, pending) and its free ids the rest,
// then runs the warm-up churn.
func (p *pair) churnSetup(d dist) {
	p.live = make([]int, pending)
	for k := range pending {
		p.live[k] = k
	}
	for k := pending; k < pending+extra; k++ {
		p.free = append(p.free, k)
	}
	r := rand.New(rand.NewPCG(4, 4))
	for range steadyWarmup {
		p.cancelRandom(r)
		k := p.take()
		p.add(k, d.delay(r))
	}
}

// cancelRandom cancels a random pending id on both sides.
func (p *pair) cancelRandom(r *rand.Rand) {
	j := r.IntN(len(p.live))
	k := p.live[j]
	p.cancel(k)
	p.live[j] = p.live[len(p.live)-1]
	p.live = p.live[:len(p.live)-1]
	p.free = append(p.free, k)
}

// take returns a free id, recorded as pending.
func (p *pair) take() int {
	k := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	p.live = append(p.live, k)
	return k
}

// steadyMin is the fewest adds an op=steady sample times, whatever b.N:
// AfterFunc's cost in this churn swings over windows of 100k adds (about 175
// to 300 ns per add, for reasons inside the runtime's timers that I did not
// pin down), and a window of 1M averages the swings out.
const steadyMin = 1_000_000

// steadyAdds is how many adds an op=steady sample of b.N times: at least
// steadyMin, except in the framework's b.N = 1 probe.
func steadyAdds(bN int) int {
	if bN == 1 {
		return 1
	}
	return max(bN, steadyMin)
}

// pairedSteady adds n entries to each side in batches, cancelling as many
// random pending ones after each batch (untimed), and returns what the adds
// took on each side.
func pairedSteady(n int, p *pair, d dist) (w, a side) {
	r := rand.New(rand.NewPCG(5, uint64(n)))
	batch := make([]int, 0, pairedBatch)
	delays := make([]time.Duration, pairedBatch)
	runtime.GC() // as in pairedSchedule
	for i, turn := 0, 0; i < n; i, turn = i+pairedBatch, turn+1 {
		batch = batch[:0]
		for j := 0; j < min(pairedBatch, n-i); j++ {
			batch = append(batch, p.take())
			delays[j] = d.delay(r)
		}
		p.addBatch(turn, &w, &a, batch, delays[:len(batch)])
		for range batch {
			p.cancelRandom(r)
		}
	}
	return w, a
}
