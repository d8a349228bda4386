package sched

import "github.com/axbridge/axbridge/kvstore/record"

// Apply indexes one watch event: every live record has exactly one entry, at the time its next
// step is due (fire, pre-read or lease end); a finished record has none (the server retires it).
// Events of partitions not owned are ignored (a watch of a partition that moved away runs until
// the new one is up).
func (c *Core) Apply(ev record.Event) {
	if ev.Kind != record.EventInitDone && !c.Owns(ev.ID) {
		return
	}
	switch ev.Kind {
	case record.EventPut:
		c.put(ev.Entry)
	case record.EventDelete:
		c.ready.Drops = append(c.ready.Drops, Drop{ev.ID, ev.Revision})
		if cur, ok := c.idx.get(ev.ID); ok && cur.rev > ev.Revision {
			return
		}
		c.forget(ev.ID)
	case record.EventError:
		if cur, ok := c.idx.get(ev.ID); ok && cur.rev < ev.Revision {
			// Its older revision is gone: reading it again cannot help.
			c.idx.remove(ev.ID)
			c.census.dead.Remove(ev.ID)
			if t := c.tasks[ev.ID]; t != nil {
				c.dropNear(t)
				c.setHeld(t, nil)
				t.retry, t.retryDue = false, 0
				c.tidy(ev.ID)
			}
		}
	}
}

// put indexes a record written (or loaded).
func (c *Core) put(e record.Entry) {
	id := e.Task.ID
	if cur, ok := c.idx.get(id); ok && (cur.rev > e.Revision || cur.rev == e.Revision && e.Partial) {
		// An older revision than the one indexed, or the state of the one indexed again (a
		// watch started again): nothing new, and the payload held near stays.
		return
	}
	c.track(&e)
	t := c.tasks[id]
	if t == nil {
		t = &task{}
	}
	if t.held != nil {
		if e.Revision <= t.held.Revision {
			return // the claim's own write: its fire stays due at the due time
		}
		c.setHeld(t, nil) // a newer write wins: the fire held for the due time is dropped
	}
	if t.flying {
		if t.fl.rev >= e.Revision {
			return // a worker has this revision in hand (a watch started again replays it)
		}
		c.endFlight(t)
	}
	t.retry, t.retryDue, t.behind = false, 0, 0
	c.dropNear(t)
	if tok := t.unsure; tok != 0 && e.Revision > tok {
		t.unsure = 0
		c.unsureLanded(&e, tok)
	}
	c.index(t, e) // adds t to the map if it holds e's payload
	c.tidy(id)
}

// unsureLanded queues the fire of a claim whose outcome was unknown if e, a newer revision, is
// that claim landed: RUNNING under this replica with token tok. A partial entry (no payload)
// cannot be published: the worker reads the record back.
func (c *Core) unsureLanded(e *record.Entry, tok uint64) {
	if !OwnClaim(&e.Task, c.cfg.Replica, tok) {
		return
	}
	j := Job{Kind: Fire, ID: e.Task.ID, Rev: tok, Due: e.Task.DueAt, Unsure: true}
	if !e.Partial {
		ec := *e
		j.Entry = &ec
	}
	c.fires = append(c.fires, j)
}

// index puts e's next step in the index, or takes the task out if it is final.
func (c *Core) index(t *task, e record.Entry) {
	id, rt := e.Task.ID, &e.Task
	tag := c.tagOfTask(rt)
	c.keepDead(e, tag)
	if rt.Status != record.StatusRunning {
		c.ready.Drops = append(c.ready.Drops, Drop{id, e.Revision})
	}
	switch rt.Status {
	case record.StatusWaiting:
		if !c.idx.inSpan(rt.DueAt, c.now.Ms) {
			c.idx.putIn(c.idx.laneOf(rt.BizType), id, rt.DueAt, e.Revision, Fire, tag) // read ahead as it enters the span (Now)
			return
		}
		switch {
		case !e.Partial:
			c.keepNear(id, t, &e)
		case rt.DueAt > c.now.Ms:
			// Its payload was not loaded (a watch's initial values): read it now, in a batch
			// with the others, and keep the record read back, not this one. An overdue one is
			// fired at once, and its fire reads the record itself.
			c.preRead(id)
		}
		c.idx.putIn(c.idx.laneOf(rt.BizType), id, rt.DueAt, e.Revision, Fire, tag)
	case record.StatusRunning:
		c.idx.put(id, c.leaseDue(rt), e.Revision, Lease, tag)
	default: // final: nothing more to do here
		c.idx.remove(id)
	}
}

// keepNear holds e with its payload as t's, if the pre-read bounds leave room. A partial entry
// has no payload to hold: a fire taking it would publish an empty body.
func (c *Core) keepNear(id string, t *task, e *record.Entry) {
	if e.Partial {
		return
	}
	n := RecordBytes(&e.Task)
	if c.nearN >= c.cfg.MaxPreReadTasks || c.nearBytes+n > c.cfg.MaxPreReadBytes {
		return
	}
	c.dropNear(t)
	t.near = e
	c.nearN++
	c.nearBytes += n
	c.tasks[id] = t
}

// dropNear lets go of the record t holds with its payload, if any.
func (c *Core) dropNear(t *task) {
	if t != nil && t.near != nil {
		c.nearBytes -= RecordBytes(&t.near.Task)
		c.nearN--
		t.near = nil
	}
}
