package timingwheel_test

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"

	"github.com/axbridge/axbridge/timingwheel"
)

// benchIndexes are the indexes the benchmarks compare: the heap alone and the hybrid of two spans
// (in ms, the bridge's unit).
var benchIndexes = []struct {
	name string
	new  func(queues int) *timingwheel.Index
}{
	{"heap", timingwheel.New},
	{"wheel-2000", func(queues int) *timingwheel.Index { return timingwheel.NewWheel(queues, 2_000) }},
	{"wheel-10000", func(queues int) *timingwheel.Index { return timingwheel.NewWheel(queues, 10_000) }},
}

// benchIDs are n UUID-sized ids.
func benchIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "0190c5e2-7d3a-7000-8000-" + strconv.FormatInt(int64(100000000000+i), 10)
	}
	return ids
}

// BenchmarkIndex indexes 1M entries (UUID-sized ids, due times spread over a day, in ms) and
// takes them all out in deadline order, advancing to each due time as the bridge's loop would
// wake for it, reporting the cost per entry and the index's memory per entry, and the CPU time of
// one full garbage collection with the index in the heap (the collector's cost of the index: it
// marks every pointer it holds). A wheel starts at 0, before the entries are put.
func BenchmarkIndex(b *testing.B) {
	const n = 1 << 20
	ids := benchIDs(n)
	r := rand.New(rand.NewPCG(1, 2))
	dues := make([]int64, n)
	for i := range dues {
		dues[i] = r.Int64N(86_400_000)
	}
	for _, bi := range benchIndexes {
		b.Run(bi.name, func(b *testing.B) {
			var perEntry, gcCPU float64
			for range b.N {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				x := bi.new(2)
				x.Advance(0, nil)
				for i, id := range ids {
					x.Put(0, timingwheel.Entry{ID: id, Due: dues[i], Value: uint64(i), Kind: 1})
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perEntry = float64(after.HeapAlloc-before.HeapAlloc) / n
				c0 := cpuTime()
				runtime.GC()
				gcCPU = float64(cpuTime() - c0)
				for x.Len() > 0 {
					due, _ := x.PeekDue(0)
					x.Advance(due, nil)
					x.Pop(0)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/task")
			b.ReportMetric(perEntry, "B/task")
			b.ReportMetric(gcCPU/1e6, "gc-cpu-ms")
		})
	}
	runtime.KeepAlive(ids)
}

// BenchmarkFireLoop is the bridge loop's use of the index in a steady state: 1M entries pending,
// due 10 per ms on average (10,000 fires a second), time moving 1 ms a step. Each step advances
// the index (the hybrid reports the entries entering its window; the heap alone ignores it), pops
// every due entry and puts one in its place, due 50 to 150 s ahead, so that 1M stay pending. An
// op is one simulated second; cpu-ms/s is the process's CPU time per simulated second (garbage
// collection included), the index's share of a loop firing 10,000 a second.
func BenchmarkFireLoop(b *testing.B) {
	const n = 1_000_000
	ids := benchIDs(n)
	for _, bi := range benchIndexes {
		b.Run(bi.name, func(b *testing.B) {
			r := rand.New(rand.NewPCG(3, 4))
			x := bi.new(3)
			x.Advance(0, nil)
			for i, id := range ids {
				x.Put(0, timingwheel.Entry{ID: id, Due: r.Int64N(100_000), Value: uint64(i), Kind: 1})
			}
			var now int64
			var fires, entered int
			enter := func(timingwheel.Entry) { entered++ }
			step := func() {
				now++
				x.Advance(now, enter)
				for {
					if due, ok := x.PeekDue(0); !ok || due > now {
						break
					}
					e, _ := x.Pop(0)
					e.Due = now + 50_000 + r.Int64N(100_000)
					x.Put(0, e)
					fires++
				}
			}
			for range 2_000 { // warm up: the window fills, the collector paces itself
				step()
			}
			fires, entered = 0, 0
			runtime.GC()
			b.ResetTimer()
			c0 := cpuTime()
			for range b.N {
				for range 1_000 {
					step()
				}
			}
			cpu := float64(cpuTime() - c0)
			b.ReportMetric(cpu/float64(b.N)/1e6, "cpu-ms/s")
			b.ReportMetric(cpu/float64(fires), "cpu-ns/fire")
			b.ReportMetric(float64(fires)/float64(b.N), "fires/s")
			b.ReportMetric(float64(entered)/float64(b.N), "entered/s")
			if x.Len() != n {
				b.Fatalf("%d pending, want %d", x.Len(), n)
			}
		})
	}
}
