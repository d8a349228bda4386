package timingwheel

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkAdd measures what an Add computes, with everything in cache: a
// wheel of at most 1024 entries, into which batches of 1024 UUID-length ids
// are added (timed) and removed (untimed), one clock read per 64 adds as an
// owner does. call=Add passes now.Add(delay), call=AddAfter passes now and
// the delay. The memory side of an Add at a million entries is measured in
// the bench module.
func BenchmarkAdd(b *testing.B) {
	const batch = 1024
	ids := make([]string, batch)
	for k := range ids {
		ids[k] = fmt.Sprintf("%08x-0000-4000-8000-%012x", k, k*7919)
	}
	for _, call := range []string{"Add", "AddAfter"} {
		b.Run("call="+call, func(b *testing.B) {
			w := New[uint32](time.Now(), Options{})
			b.ResetTimer()
			b.StopTimer()
			for n := 0; n < b.N; n += batch {
				b.StartTimer()
				var now time.Time
				for j, id := range ids {
					if j%64 == 0 {
						now = time.Now()
					}
					if call == "Add" {
						w.Add(id, now.Add(30*time.Second), uint32(j))
					} else {
						w.AddAfter(id, now, 30*time.Second, uint32(j))
					}
				}
				w.flush()
				b.StopTimer()
				for _, id := range ids {
					w.Remove(id)
				}
			}
			if w.Len() != 0 {
				b.Fatalf("Len %d after removing every id", w.Len())
			}
		})
	}
}
