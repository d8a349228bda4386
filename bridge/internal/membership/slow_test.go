package membership

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// A member whose heartbeats land at once but are confirmed slowly, too slowly to keep its fence
// or at all, leaves no partition without an owner while the other counts it alive: over eight
// leases each partition is ownerless for less than a lease in all, and never has two owners.
func TestSlowConfirmationsLeaveNoPartitionOwnerless(t *testing.T) {
	t.Parallel()
	for _, slow := range []time.Duration{lease * 7 / 10, lease * 9 / 10} {
		t.Run(fmt.Sprint(slow), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				s := newMemStore()
				a, b := join(t, s, "a", nil), join(t, s, "b", nil)
				synctest.Wait()
				s.set("a", func(f *faults) { f.slow = slow })
				none := watchOwners(t, 8*lease, a, b)
				worst := 0
				for p, d := range none {
					if d > none[worst] {
						worst = p
					}
				}
				t.Logf("at most %v without an owner in all, partition %d", none[worst], worst)
				if d := none[worst]; d >= lease {
					t.Errorf("partition %d had no owner for %v in all over eight leases (lease %v)", worst, d, lease)
				}
				s.set("a", func(f *faults) { f.slow = 0 })
				after(3 * lease)
				split(t, a, b)
			})
		})
	}
}
