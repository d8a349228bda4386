package membership

import (
	"fmt"
	"slices"
	"testing"
)

// The assignment gives every partition exactly one owner, an equal share to each member (⌊n/k⌋ or
// ⌈n/k⌉), does not depend on the order of the members, and when a member leaves it moves its
// partitions and only a few others.
func TestAssign(t *testing.T) {
	t.Parallel()
	for k := 1; k <= 10; k++ {
		var ms []string
		for i := range k {
			ms = append(ms, fmt.Sprintf("replica-%d", i))
		}
		owner := Assign(ms, 60)
		count := map[string]int{}
		for p, m := range owner {
			if m == "" {
				t.Fatalf("%d members: partition %d has no owner", k, p)
			}
			count[m]++
		}
		for _, m := range ms {
			if c := count[m]; c != 60/k && c != (60+k-1)/k {
				t.Errorf("%d members: %s owns %d of 60", k, m, c)
			}
		}
		rev := slices.Clone(ms)
		slices.Reverse(rev)
		if !slices.Equal(Assign(rev, 60), owner) {
			t.Errorf("%d members: the assignment depends on the order of the members", k)
		}
		if k < 2 {
			continue
		}
		after := Assign(ms[:k-1], 60) // the last one leaves
		moved := 0
		for p := range owner {
			if owner[p] != ms[k-1] && after[p] != owner[p] {
				moved++
			}
		}
		t.Logf("%d → %d members: %d partitions of the leaving one moved, and %d others", k, k-1, count[ms[k-1]], moved)
		if moved > 60/k {
			t.Errorf("%d → %d members: %d partitions of staying members moved", k, k-1, moved)
		}
	}
}
