package bridge

import "github.com/axbridge/axbridge/kvstore"

// ownsID reports whether task id is in a partition this loop indexes.
func (l *loopState) ownsID(id string) bool {
	p := kvstore.Partition(id, l.b.nparts)
	return p < len(l.owned) && l.owned[p]
}

// ownedList is the sorted list of the partitions this loop indexes.
func (l *loopState) ownedList() []int {
	var ps []int
	for p, ok := range l.owned {
		if ok {
			ps = append(ps, p)
		}
	}
	return ps
}

// reown takes the new set of owned partitions. Whatever the loop holds of a partition it lost
// goes: index entries (the index is rebuilt from its own entries, once per move, so it keeps no
// memory of another replica's tasks), pre-read records, queued jobs and the bookkeeping of steps
// in flight. Gained partitions come with the watch the loop starts next.
func (l *loopState) reown(parts []bool) {
	lost := false
	for p, own := range l.owned {
		if own && (p >= len(parts) || !parts[p]) {
			lost = true
			break
		}
	}
	l.owned = parts
	if !lost {
		return
	}
	before := l.idx.len()
	idx := newSlots()
	for _, h := range [...]int{heapFire, heapHouse, heapPublish} {
		for {
			e, ok := l.idx.peek(h)
			if !ok {
				break
			}
			l.idx.pop(h)
			// A held fire goes out all the same (ahead.go), and an unsure claim is read back: it
			// may have landed, and then its attempt is this replica's to publish.
			if l.ownsID(e.id) || h == heapPublish || h == heapFire && l.isUnsure(e.id, e.rev) {
				idx.put(e.id, e.due, e.rev, e.kind)
			}
		}
	}
	l.idx = idx
	for id := range l.near {
		if !l.ownsID(id) {
			l.dropNear(id)
		}
	}
	for id, f := range l.flight {
		// Only queued steps, which keepJobs drops below. A step a worker holds keeps its entry
		// until its result comes (result forgets it then): should the partition come back
		// meanwhile, a replay of the revision the worker claims must not be claimed again.
		if !l.ownsID(id) && f.queued {
			delete(l.flight, id)
		}
	}
	for id := range l.retrying {
		if !l.ownsID(id) {
			delete(l.retrying, id)
		}
	}
	for id := range l.behind {
		if !l.ownsID(id) {
			delete(l.behind, id)
		}
	}
	l.fires = l.keepJobs(l.fires)
	l.house = l.keepJobs(l.house)
	l.reads = l.keepIDs(l.reads)
	l.b.fired.dropIf(func(id string) bool { return !l.ownsID(id) })
	l.b.log.Info("partitions moved away: their tasks left the index", "indexed_before", before, "indexed", l.idx.len())
}

// isUnsure reports whether the claim of id's revision rev had an unknown outcome.
func (l *loopState) isUnsure(id string, rev uint64) bool {
	tok, ok := l.unsure[id]
	return ok && tok == rev
}

// keepJobs keeps the jobs of owned partitions, and the read-backs of unsure claims wherever they
// are (a pre-read job keeps its owned ids).
func (l *loopState) keepJobs(js []job) []job {
	out := js[:0]
	for _, j := range js {
		if j.Kind == jobPreRead {
			if j.IDs = l.keepIDs(j.IDs); len(j.IDs) > 0 {
				out = append(out, j)
			}
			continue
		}
		if l.ownsID(j.ID) || j.Unsure {
			out = append(out, j)
		}
	}
	clear(js[len(out):])
	if len(out) == 0 {
		return nil
	}
	return out
}

func (l *loopState) keepIDs(ids []string) []string {
	var out []string
	for _, id := range ids {
		if l.ownsID(id) {
			out = append(out, id)
		}
	}
	return out
}

// forget drops everything the loop holds of task id.
func (l *loopState) forget(id string) {
	l.idx.remove(id)
	l.dropNear(id)
	delete(l.held, id)
	delete(l.flight, id)
	delete(l.retrying, id)
	delete(l.unsure, id)
	delete(l.behind, id)
}
