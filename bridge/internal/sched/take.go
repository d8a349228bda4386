package sched

import (
	"time"

	"github.com/axbridge/axbridge/kvstore/record"
)

// Take moves due steps from the index into the job queues, in deadline order, while the queues
// have room and fires the claim budget (budget.go); the rest stays indexed until a later turn.
// alive says whether this replica's heartbeats are confirmed: fenced, it takes nothing until they
// are. connected says whether its connection to NATS is up (a held fire is not published into the
// reconnect buffer, and fewer fires are claimed).
func (c *Core) Take(alive, connected bool) {
	c.prune()
	c.connected = connected
	if !alive {
		c.flushReads()
		return
	}
	c.PublishDue(true, connected)
	ms := c.now.Ms
	room := c.claimRoom()
	c.expireAway()
	for len(c.fires) < MaxQueued && room > 0 {
		n, ok := c.idx.popDue(record.AddMs(ms, c.ahead), c.open) // the bizTypes' lanes in turn
		if !ok {
			break
		}
		c.spend(n.q)
		c.takeFire(n)
		room--
	}
	for len(c.house) < MaxQueued {
		n, ok := c.idx.peek(heapHouse)
		if !ok || n.due > ms {
			break
		}
		c.idx.pop(heapHouse)
		c.house = append(c.house, Job{Kind: Lease, ID: n.id, Rev: n.rev, Due: n.due})
		c.setFlight(c.ensure(n.id), n.id, flight{rev: n.rev, queued: true, due: n.due, tag: n.tag})
	}
	c.flushReads()
}

// takeFire queues the fire of n, taken from the index.
func (c *Core) takeFire(n slotEntry) {
	j := Job{Kind: Fire, ID: n.id, Rev: n.rev, Due: n.due, Ahead: c.ahead, Taken: c.now.Mono}
	t := c.ensure(n.id)
	c.endFlight(t) // counted in its old lane
	t.lane = n.q
	if t.unsure != 0 && t.unsure == n.rev {
		j.Unsure = true // the worker owns the read-back now
		t.unsure = 0
	}
	if t.retry {
		j.Due = t.retryDue
		t.retry, t.retryDue = false, 0
	}
	if e := t.near; e != nil {
		c.dropNear(t)
		if e.Revision == n.rev {
			j.Entry = e
		}
	}
	c.fires = append(c.fires, j)
	c.setFlight(t, n.id, flight{rev: n.rev, queued: true, due: j.Due, fire: true, tag: n.tag})
}

// preRead queues id for the next batched pre-read, if the pre-read bounds leave room.
func (c *Core) preRead(id string) {
	if t := c.tasks[id]; t != nil && t.near != nil {
		return
	}
	if c.nearN+len(c.reads) < c.cfg.MaxPreReadTasks && c.nearBytes < c.cfg.MaxPreReadBytes {
		c.reads = append(c.reads, id)
	}
}

// flushReads turns the ids collected for pre-reading into batched read jobs, while the
// housekeeping queue has room.
func (c *Core) flushReads() {
	for len(c.reads) > 0 && len(c.house) < MaxQueued {
		n := min(len(c.reads), preReadBatch)
		c.house = append(c.house, Job{Kind: PreRead, IDs: c.reads[:n:n]})
		c.reads = c.reads[n:]
	}
	if len(c.reads) == 0 {
		c.reads = nil
	}
}

// prune forgets, every 10 × flightStale, steps a worker took that long ago and never reported:
// the reconciler repairs their records.
func (c *Core) prune() {
	if c.now.Mono.Sub(c.lastPrune) < 10*flightStale {
		return
	}
	c.lastPrune = c.now.Mono
	for id, t := range c.tasks {
		if t.flying && !t.fl.queued && c.now.Mono.Sub(t.fl.at) >= 10*flightStale {
			c.endFlight(t)
			c.tidy(id)
		}
	}
}

// Next is the job to hand out next (fires first, a housekeeping job after every houseEvery
// fires); false when there is none. Sent tells the core that a worker took it.
func (c *Core) Next() (Job, bool) {
	house := len(c.house) > 0 && (c.house[0].Kind != PreRead || c.readsOut < maxReadsOut)
	c.fromHouse = house && (len(c.fires) == 0 || c.firesInRow >= houseEvery)
	switch {
	case c.fromHouse:
		return c.house[0], true
	case len(c.fires) > 0:
		return c.fires[0], true
	}
	return Job{}, false
}

// Sent drops the job j, which Next returned, from its queue: the step is now in a worker's hands.
func (c *Core) Sent(j Job) {
	if t := c.tasks[j.ID]; t != nil && j.Kind != PreRead && t.flying && t.fl.rev == j.Rev {
		c.setFlight(t, j.ID, flight{rev: j.Rev, at: c.now.Mono, due: t.fl.due,
			claim: j.Kind == Fire && c.Owns(j.ID), fire: t.fl.fire, tag: t.fl.tag})
	}
	if j.Kind == Fire && j.Ahead > 0 {
		c.aheadUntil = max(c.aheadUntil, j.Due)
	}
	if j.Kind == PreRead {
		c.readsOut++
	}
	q := &c.fires
	c.firesInRow++
	if c.fromHouse {
		q, c.firesInRow = &c.house, 0
	}
	(*q)[0] = Job{}
	*q = (*q)[1:]
	if len(*q) == 0 {
		*q = nil
	}
}

// Wait is how long the caller may sleep before the next Take could take a step: at most limit.
func (c *Core) Wait(alive bool, limit time.Duration) time.Duration {
	d := limit
	if !alive {
		return d
	}
	// PeekDue where only the due time matters: it copies no id.
	if len(c.fires) < MaxQueued {
		if c.claimRoom() > 0 {
			if due, ok := c.idx.nextFire(c.opensAt); ok {
				d = c.now.Until(record.SubMs(due, c.ahead), d)
			}
		} else {
			d = c.claimWait(d) // a result or a watch event may make room before that
		}
	}
	if at, ok := c.idx.entering(); ok { // the next fire to read ahead
		d = c.now.Until(at, d)
	}
	if due, ok := c.idx.x.PeekDue(heapPublish); ok {
		d = c.now.Until(due, d)
	}
	if len(c.house) < MaxQueued {
		if due, ok := c.idx.x.PeekDue(heapHouse); ok {
			d = c.now.Until(due, d)
		}
	}
	return d
}
