package sched

import "time"

// The claim budget. A fire is claimed only if it can be published now: the core takes a fire from
// its index only while the fires taken and not yet out (queued for a worker, or in a worker's
// hands until the core sees the claim's outcome) are fewer than
// Config.MaxClaims, and fewer still (a slowShare of it, at least one) while the replica is slowed:
// a watch is loading partitions, the connection to NATS is down, or it is behind (a fire waited
// that long for a worker, or a claim for its outcome). The rest waits in the index, in deadline
// order, where no lease runs: a claim taken too early would spend its lease waiting for the store
// or for a worker, and its fire go out late or not at all (issue 24).

const (
	// DefaultMaxClaims is Config.MaxClaims when it is 0.
	DefaultMaxClaims = 1024
	// slowShare divides the budget while the replica is slowed.
	slowShare = 4
	// behindAfter is how long a fire may wait for a worker, or a claim for its outcome, before the
	// replica counts as behind.
	behindAfter = 500 * time.Millisecond
	// claimStale is how long a claim counts at most: by then the store has answered it (an unknown
	// outcome comes back as a Result) and the watch brought it, unless the watch is down.
	claimStale = 10 * time.Second
)

// claimOut is a fire handed to a worker (Sent): its claim counts against the budget until the
// core sees its outcome (the flight ends) or claimStale has passed.
type claimOut struct {
	id  string
	rev uint64
	at  time.Time // monotonic: when it was handed out
}

// SetLoading says whether a watch is still loading partitions this core owns.
func (c *Core) SetLoading(loading bool) { c.loading = loading }

// Claiming is the fires taken and not yet out, and the budget they are held to now.
func (c *Core) Claiming() (n, budget int) {
	c.ageClaims()
	return c.claimsUsed(), c.claimBudget()
}

// claimsUsed counts the fires queued and the claims in a worker's hands. Claims that landed
// ahead and are held for their due time do not count: they are out of the store's way, and
// counting them starved the claim-ahead window (a 50 s chaos run: p50 lateness 1.38 s, 2.8 ms
// without them).
func (c *Core) claimsUsed() int { return len(c.fires) + c.claimsN }

// claimBudget is how many fires may be out now.
func (c *Core) claimBudget() int {
	if c.loading || !c.connected || c.behind() {
		return max(1, c.cfg.MaxClaims/slowShare)
	}
	return c.cfg.MaxClaims
}

// behind reports whether a queued fire has waited behindAfter for a worker, or a claim as long for
// its outcome (ageClaims first).
func (c *Core) behind() bool {
	if len(c.fires) > 0 && !c.fires[0].Taken.IsZero() && c.now.Mono.Sub(c.fires[0].Taken) >= behindAfter {
		return true
	}
	return c.claimsN > 0 && c.now.Mono.Sub(c.claims[0].at) >= behindAfter
}

// claimRoom is how many more fires the budget lets the core take now.
func (c *Core) claimRoom() int {
	c.ageClaims()
	return c.claimBudget() - c.claimsUsed()
}

// counted reports whether o is still a claim counted against the budget.
func (c *Core) counted(o claimOut) bool {
	t := c.tasks[o.id]
	return t != nil && t.flying && t.fl.claim && t.fl.rev == o.rev && t.fl.at.Equal(o.at)
}

// ageClaims drops from the front of c.claims those no longer counted, and stops counting those
// out for claimStale (their outcome may never be seen: the reconciler looks after them), so that
// the front is the oldest counted claim. It compacts c.claims once most of it is over.
func (c *Core) ageClaims() {
	for len(c.claims) > 0 {
		o := c.claims[0]
		if c.counted(o) {
			if c.now.Mono.Sub(o.at) < claimStale {
				break
			}
			c.tasks[o.id].fl.claim = false
			c.claimsN--
		}
		c.claims[0] = claimOut{}
		c.claims = c.claims[1:]
	}
	if len(c.claims) > 2*c.claimsN+64 {
		kept := make([]claimOut, 0, 2*c.claimsN)
		for _, o := range c.claims {
			if c.counted(o) {
				kept = append(kept, o)
			}
		}
		c.claims = kept
	}
	if len(c.claims) == 0 {
		c.claims = nil
	}
}

// setFlight sets t's step in flight, ending the one it had; a fire in a worker's hands is counted
// against the budget.
func (c *Core) setFlight(t *task, id string, fl flight) {
	c.endFlight(t)
	t.fl, t.flying = fl, true
	if fl.fire {
		c.lim.pend[t.lane]++
	}
	if fl.claim {
		c.claimsN++
		c.claims = append(c.claims, claimOut{id: id, rev: fl.rev, at: fl.at})
	}
}

// endFlight forgets t's step in flight.
func (c *Core) endFlight(t *task) {
	if t.flying && t.fl.claim {
		c.claimsN--
	}
	if t.flying && t.fl.fire {
		if c.lim.pend[t.lane]--; c.lim.pend[t.lane] == 0 {
			delete(c.lim.pend, t.lane)
		}
	}
	t.fl, t.flying = flight{}, false
}

// uncount stops counting t's claim against the budget; its flight stays.
func (c *Core) uncount(t *task) {
	if t.flying && t.fl.claim {
		t.fl.claim = false
		c.claimsN--
	}
}

// claimWait is how long until the oldest counted claim stops counting, when the budget is used up.
func (c *Core) claimWait(d time.Duration) time.Duration {
	if c.claimsN == 0 {
		return d
	}
	return min(d, max(c.claims[0].at.Add(claimStale).Sub(c.now.Mono), 0))
}
