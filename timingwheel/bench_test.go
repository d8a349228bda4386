package timingwheel_test

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"

	"github.com/axbridge/axbridge/timingwheel"
)

// BenchmarkIndex indexes 1M entries (UUID-sized ids, due times spread over a day, in ms) and
// takes them all out in deadline order, reporting the cost per entry and the index's memory per
// entry, and the CPU time of one full garbage collection with the index in the heap (the
// collector's cost of the index: it marks every pointer it holds). It is the bridge's
// BenchmarkSlots of before the index moved here.
func BenchmarkIndex(b *testing.B) {
	const n = 1 << 20
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "0190c5e2-7d3a-7000-8000-" + strconv.FormatInt(int64(100000000000+i), 10)
	}
	r := rand.New(rand.NewPCG(1, 2))
	dues := make([]int64, n)
	for i := range dues {
		dues[i] = r.Int64N(86_400_000)
	}
	var perEntry, gcCPU float64
	b.ResetTimer()
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		x := timingwheel.New(2)
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
			x.Pop(0)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/task")
	b.ReportMetric(perEntry, "B/task")
	b.ReportMetric(gcCPU/1e6, "gc-cpu-ms")
	runtime.KeepAlive(ids)
}
