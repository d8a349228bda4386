package bench

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/axbridge/axbridge/kvstore"
)

// claimCounter is a bridge's task store with its claims counted: a claim is the write that
// makes a task RUNNING with the revision it replaces as its fencing token, and a conflict is such
// a write that lost its compare-and-swap (another replica, or an API call, wrote first). With
// several bridges racing for every task, all but one claim of each fire conflict; with replicas
// that divide the work, conflicts in steady state are about 0.
type claimCounter struct {
	*kvstore.JetStore
	claims, conflicts atomic.Int64
	failed            atomic.Int64 // claims that failed otherwise (store errors, unknown outcomes)
}

func (c *claimCounter) UpdateAsync(ctx context.Context, t *kvstore.Task, rev uint64, done func(uint64, error)) {
	if t.Status != kvstore.StatusRunning || t.Claim != rev {
		c.JetStore.UpdateAsync(ctx, t, rev, done) // an ack, a lease extension, a retry
		return
	}
	c.claims.Add(1)
	c.JetStore.UpdateAsync(ctx, t, rev, func(r uint64, err error) {
		switch {
		case errors.Is(err, kvstore.ErrConflict):
			c.conflicts.Add(1)
		case err != nil:
			c.failed.Add(1)
		}
		done(r, err)
	})
}

// claimTotals sums the counters of every bridge.
func claimTotals(cs []*claimCounter) (claims, conflicts, failed int64) {
	for _, c := range cs {
		claims += c.claims.Load()
		conflicts += c.conflicts.Load()
		failed += c.failed.Load()
	}
	return claims, conflicts, failed
}

// claimMetric sums, over the registries, every counter whose name starts with ax_claim and ends
// with conflicts_total (a bridge that counts its own claim conflicts), and reports whether any
// registry has one.
func claimMetric(regs []*prometheus.Registry) (float64, bool) {
	var sum float64
	found := false
	for _, reg := range regs {
		mfs, err := reg.Gather()
		if err != nil {
			continue
		}
		for _, mf := range mfs {
			name := mf.GetName()
			if !strings.HasPrefix(name, "ax_claim") || !strings.HasSuffix(name, "conflicts_total") {
				continue
			}
			found = true
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum, found
}
