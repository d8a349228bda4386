package sched

import "github.com/axbridge/axbridge/kvstore/record"

// Owns reports whether task id is in a partition this core indexes.
func (c *Core) Owns(id string) bool {
	p := record.Partition(id, c.cfg.Partitions)
	return p < len(c.owned) && c.owned[p]
}

// Owned is the sorted list of the partitions this core indexes.
func (c *Core) Owned() []int {
	var ps []int
	for p, ok := range c.owned {
		if ok {
			ps = append(ps, p)
		}
	}
	return ps
}

// OwnedParts is the owned set by partition; the caller must not change it.
func (c *Core) OwnedParts() []bool { return c.owned }

// Own takes the new set of owned partitions and reports whether any was lost. Whatever the core
// holds of a partition it lost goes: index entries (the index is rebuilt from its own entries,
// once per move, so it keeps no memory of another replica's tasks), records held with their
// payload, queued jobs and the state of steps in flight. Gained partitions come with the watch
// the caller starts next.
func (c *Core) Own(parts []bool) (lost bool) {
	for p, own := range c.owned {
		if own && (p >= len(parts) || !parts[p]) {
			lost = true
			break
		}
	}
	c.owned = parts
	if !lost {
		return false
	}
	c.rebuild()
	c.census.keepOwned(c.Owns)
	c.trackLost()
	for id, t := range c.tasks {
		if c.Owns(id) {
			continue
		}
		// A step a worker holds keeps its flight until its result comes (Result forgets it
		// then): should the partition come back meanwhile, a replay of the revision the worker
		// claims must not be claimed again. A held fire goes out all the same, and an unsure
		// claim is read back: it may have landed, and then its attempt is this replica's.
		c.dropNear(t)
		if t.flying && t.fl.queued {
			c.endFlight(t)
		}
		c.uncount(t) // its outcome may never come: the partition's watch events are not applied
		t.retry, t.retryDue, t.behind = false, 0, 0
		c.tidy(id)
	}
	c.fires = c.keepJobs(c.fires)
	c.house = c.keepJobs(c.house)
	c.reads = c.keepIDs(c.reads)
	return true
}

// rebuild keeps in a new index the entries of owned partitions, held fires and the fires of
// unsure claims.
func (c *Core) rebuild() {
	idx := newSlots(c.cfg.PreRead)
	idx.sameLanes(c.idx)
	idx.advance(c.now.Ms, func(string) {}) // at the core's time: what it re-puts is read already
	for h := range c.idx.x.Queues() {
		for {
			e, ok := c.idx.peek(h)
			if !ok {
				break
			}
			c.idx.pop(h)
			if c.Owns(e.id) || h == heapPublish || c.idx.isFireQ(h) && c.isUnsure(e.id, e.rev) {
				idx.putIn(h, e.id, e.due, e.rev, e.kind, e.tag)
			}
		}
	}
	c.idx = idx
}

// isUnsure reports whether the claim of id's revision rev had an unknown outcome.
func (c *Core) isUnsure(id string, rev uint64) bool {
	t := c.tasks[id]
	return t != nil && t.unsure != 0 && t.unsure == rev
}

// keepJobs keeps the jobs of owned partitions, and the read-backs of unsure claims wherever they
// are (a pre-read job keeps its owned ids).
func (c *Core) keepJobs(js []Job) []Job {
	out := js[:0]
	for _, j := range js {
		if j.Kind == PreRead {
			if j.IDs = c.keepIDs(j.IDs); len(j.IDs) > 0 {
				out = append(out, j)
			}
			continue
		}
		if c.Owns(j.ID) || j.Unsure {
			out = append(out, j)
		}
	}
	clear(js[len(out):])
	if len(out) == 0 {
		return nil
	}
	return out
}

func (c *Core) keepIDs(ids []string) []string {
	var out []string
	for _, id := range ids {
		if c.Owns(id) {
			out = append(out, id)
		}
	}
	return out
}
