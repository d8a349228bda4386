package bridge

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
)

// BenchmarkSlots indexes 1M tasks (UUID-sized ids, due times spread over a day) and takes them all
// out in deadline order, reporting the cost per task and the index's memory per task.
func BenchmarkSlots(b *testing.B) {
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
	var perTask float64
	b.ResetTimer()
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := newSlots()
		for i, id := range ids {
			s.put(id, dues[i], uint64(i), jobFire)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perTask = float64(after.HeapAlloc-before.HeapAlloc) / n
		for s.len() > 0 {
			s.pop(heapFire)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/task")
	b.ReportMetric(perTask, "B/task")
}
