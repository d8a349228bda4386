package membership

import (
	"testing"
	"time"
)

// owners counts, by partition, the members of ns that own it now.
func owners(ns ...*node) []int {
	c := make([]int, parts)
	for _, n := range ns {
		for _, p := range n.owned() {
			c[p]++
		}
	}
	return c
}

// watchOwners samples ns every 10 ms for d: it reports a partition owned twice at once, and
// returns for how long each partition had no owner.
func watchOwners(t *testing.T, d time.Duration, ns ...*node) []time.Duration {
	t.Helper()
	const step = 10 * time.Millisecond
	none := make([]time.Duration, parts)
	twice := false
	for start := time.Now(); time.Since(start) < d; after(step) {
		for p, c := range owners(ns...) {
			switch {
			case c == 0:
				none[p] += step
			case c > 1 && !twice:
				twice = true
				t.Errorf("%v after the start, partition %d has %d owners", time.Since(start), p, c)
			}
		}
	}
	return none
}
