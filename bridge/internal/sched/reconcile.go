package sched

import (
	"github.com/axbridge/axbridge/internal/retry"
	"github.com/axbridge/axbridge/kvstore/record"
)

// Suspect compares a candidate of the reconciler with the index: a record the index holds at
// that revision (or a newer one), due no later than it should be, is fine, and so is one a worker
// has in hand. It returns why the candidate is suspect ("missing", "late"), or "" if it is not.
func (c *Core) Suspect(cd Candidate) string {
	if cur, ok := c.idx.get(cd.ID); ok && cur.rev >= cd.Rev {
		// A step put back after a failed store call is due again within retry.Step.First.
		if cur.rev > cd.Rev || cur.due <= cd.Due || cur.due <= record.AddMs(c.now.Ms, retry.Step.First) {
			return ""
		}
		return "late"
	}
	if t := c.tasks[cd.ID]; t != nil && t.flying && t.fl.rev >= cd.Rev &&
		(t.fl.queued || c.now.Mono.Sub(t.fl.at) < flightStale) {
		return ""
	}
	return "missing"
}

// Repair indexes the step of a candidate the reconciler confirmed, due now.
func (c *Core) Repair(cd Candidate) {
	if t := c.tasks[cd.ID]; t != nil {
		c.endFlight(t)
		t.retry, t.retryDue = false, 0
		c.tidy(cd.ID)
	}
	c.idx.put(cd.ID, c.now.Ms, cd.Rev, cd.Kind, c.tagOfTask(&record.Task{BizType: cd.BizType, Series: cd.Series}))
}

// Overdue counts the fires due by now that have not gone out (indexed, queued, or waiting for a
// retry after a failed store call) and returns the earliest due time among them. Those of paused
// bizTypes are not among them: PausedDue counts them.
func (c *Core) Overdue() (n int, oldest int64) {
	n, oldest, c.pausedDue = c.idx.countFires(c.now.Ms, c.paused)
	for _, j := range c.fires {
		if j.Due > c.now.Ms {
			continue // taken ahead of its due time
		}
		if n == 0 || j.Due < oldest {
			oldest = j.Due
		}
		n++
	}
	for id, t := range c.tasks {
		if !t.retry {
			continue
		}
		if e, ok := c.idx.get(id); ok && e.due > c.now.Ms && t.retryDue <= c.now.Ms { // not counted above
			if n == 0 || t.retryDue < oldest {
				oldest = t.retryDue
			}
			n++
		}
	}
	return n, oldest
}
