package membership

import (
	"testing"
	"testing/synctest"
)

// A member whose clock runs ahead of the store's by more than the fence margin counts a key of
// its initial load from its arrival, as every heartbeat: it takes a cut-off member's partitions
// only once that member has fenced itself, never while both own them.
func TestSkewedJoinerCountsLoadFromArrival(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		s.lag = lease * 3 / 10
		a := join(t, s, "a", nil)
		synctest.Wait()
		b := join(t, s, "b", nil)
		synctest.Wait()
		split(t, a, b)
		s.set("a", func(f *faults) { f.cut = true })
		watchOwners(t, 2*lease, a, b)
		if n := len(b.owned()); n != parts {
			t.Errorf("two leases after a was cut off, b owns %d partitions", n)
		}
		s.set("a", func(f *faults) { f.cut = false })
	})
}
