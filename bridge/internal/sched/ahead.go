package sched

import (
	"github.com/axbridge/axbridge/internal/retry"
	"github.com/axbridge/axbridge/kvstore/record"
)

// hold takes a landed claim whose task is not due yet: it is published at its due time (Ready).
// It is dropped if the record changed meanwhile: the index expects the claimed revision (the
// claim's own watch event came) or still has the claimed WAITING revision in flight (it has not
// yet).
func (c *Core) hold(e *record.Entry) {
	id := e.Task.ID
	t := c.ensure(id)
	cur, indexed := c.idx.get(id)
	switch {
	case !c.Owns(id):
		// The partition moved away meanwhile and Own dropped the task's steps, so its watch
		// events are no longer applied: the claim won its CAS and is fired all the same, as a
		// held fire whose partition moves is (the new owner waits for its lease).
	case indexed && cur.rev == e.Revision: // the claim's own watch event came first
	case !indexed && t.flying && t.fl.rev == e.Task.Claim: // the claim's watch event is still to come
	default: // a newer write or a delete came on the watch (it ended the flight)
		c.tidy(id)
		return
	}
	c.endFlight(t)
	c.track(e)
	t.retry, t.retryDue = false, 0
	c.dropNear(t)
	c.setHeld(t, e)
	c.idx.put(id, e.Task.DueAt, e.Revision, Publish, c.tagOfTask(&e.Task))
}

// PublishDue hands out (Ready.Publish) the held fires that are due by the core's time, at most
// maxPublishTurn of them; each task's next step is then its lease end. Fenced (not alive), a due
// held fire is not published: its lease ends as after a crash, and whoever owns the partition
// then fires the task again. While the connection is down (not connected) a due held fire waits:
// published now it would sit in the reconnect buffer and could reach the consumer after the next
// attempt; held, it goes out after the reconnect if its lease still runs then.
func (c *Core) PublishDue(alive, connected bool) {
	for range maxPublishTurn {
		n, ok := c.idx.peek(heapPublish)
		if !ok || n.due > c.now.Ms {
			return
		}
		c.idx.pop(heapPublish)
		t := c.tasks[n.id]
		if t == nil || t.held == nil {
			continue
		}
		e := t.held
		c.setHeld(t, nil)
		c.tidy(n.id)
		if e.Revision != n.rev {
			continue
		}
		if c.Owns(n.id) {
			c.idx.put(n.id, c.leaseDue(&e.Task), e.Revision, Lease, n.tag)
		}
		switch {
		case !alive:
			c.ready.Fenced = append(c.ready.Fenced, *e)
		case !connected && c.now.Ms < e.Task.LeaseUntil:
			c.setHeld(c.ensure(n.id), e)
			c.idx.put(n.id, record.AddMs(c.now.Ms, retry.Held.Wait(1)), e.Revision, Publish, n.tag)
		default:
			c.ready.Publish = append(c.ready.Publish, *e)
		}
	}
}

// Held is the number of claims held for their due time.
func (c *Core) Held() int { return c.heldN }

// AheadUntil is the latest due time (UTC Unix ms) of a fire handed out ahead of it.
func (c *Core) AheadUntil() int64 { return c.aheadUntil }

// NextPublish is the due time of the earliest held fire.
func (c *Core) NextPublish() (int64, bool) { return c.idx.x.PeekDue(heapPublish) }
