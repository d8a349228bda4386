package sched

import (
	"github.com/axbridge/axbridge/internal/retry"
	"github.com/axbridge/axbridge/kvstore/record"
)

// Result takes a worker's report back into the index.
func (c *Core) Result(r Result) {
	switch {
	case r.Created != nil:
		c.Apply(record.Event{Kind: record.EventPut, ID: r.Created.Task.ID, Revision: r.Created.Revision, Entry: *r.Created})
	case r.Held != nil: // a claim that landed is fired even if its partition moved
		c.hold(r.Held)
	case r.Read: // pre-read records: keep those the index still expects at that revision
		c.readsOut = max(0, c.readsOut-1)
		for i := range r.Entries {
			e := &r.Entries[i]
			if cur, ok := c.idx.get(e.Task.ID); ok && cur.rev == e.Revision && cur.kind == Fire {
				c.keepNear(e.Task.ID, c.ensure(e.Task.ID), e)
				c.tidy(e.Task.ID)
			}
		}
	case !c.Owns(r.ID) && !r.Unsure:
		c.forget(r.ID) // the partition moved away while a worker had the step
	default:
		c.putBack(r)
		c.tidy(r.ID)
	}
}

// putBack indexes the step of r again, unless a newer revision is indexed or in flight.
func (c *Core) putBack(r Result) {
	t := c.ensure(r.ID)
	newer := false
	if cur, ok := c.idx.get(r.ID); ok && cur.rev > r.Rev {
		newer = true
	} else if t.flying && t.fl.rev > r.Rev {
		newer = true
	}
	switch {
	case r.Unsure && newer:
		// The watch brought a newer revision before the claim's outcome: it may be that claim.
		// A worker reads the record back and publishes the attempt if so.
		c.fires = append(c.fires, Job{Kind: Fire, ID: r.ID, Rev: r.Rev, Due: c.now.Ms, Unsure: true})
		return
	case newer:
		return // a newer revision is indexed already
	case r.Unsure:
		t.unsure = r.Rev
	case r.Behind:
		if !t.flying || t.fl.rev != r.Rev {
			return // a delete or a newer revision came meanwhile
		}
		t.behind++
		if !retry.ReadBehind.More(t.behind) {
			t.behind = 0
			c.endFlight(t)
			c.ready.Behind = append(c.ready.Behind, r.ID)
			return
		}
		r.At = record.AddMs(c.now.Ms, retry.ReadBehind.Wait(t.behind))
	}
	due, tag := r.At, uint32(0)
	if cur, ok := c.idx.get(r.ID); ok {
		tag = cur.tag
	}
	if t.flying && t.fl.rev <= r.Rev {
		due, tag = min(due, t.fl.due), t.fl.tag
		c.endFlight(t)
	}
	q := heapOf(r.Kind)
	if r.Kind == Fire {
		q = t.lane // back into its bizType's lane
	}
	c.idx.putIn(q, r.ID, r.At, r.Rev, r.Kind, tag)
	if r.Retry && r.Kind == Fire && due < r.At {
		t.retry, t.retryDue = true, due // still overdue while it waits for its retry
	}
}

// forget drops everything the core holds of task id.
func (c *Core) forget(id string) {
	c.idx.remove(id)
	c.census.dead.Remove(id)
	c.untrack(id)
	if t := c.tasks[id]; t != nil {
		c.endFlight(t)
		c.dropNear(t)
		c.setHeld(t, nil)
		delete(c.tasks, id)
	}
}
