package sched

import (
	"bytes"
	"slices"

	"github.com/axbridge/axbridge/kvstore/record"
	"github.com/axbridge/axbridge/timingwheel"
)

// The census (issue 26): what the operator API lists and counts, answered from what the core
// holds, never from the bucket. Each live task is one index entry (or one step in flight), tagged
// with its bizType's number in the entry's padding, so telling tasks apart costs no memory per
// task; a DEAD record, which the index does not hold, is kept in an index of its own (dead) until
// the server retires it or it is requeued. SUCCESS and CANCELLED records are neither listed nor
// counted here: a busy bucket holds millions of them, and the metrics count them as they happen.

// census is the core's state for List and Count.
type census struct {
	nums  map[string]uint32 // bizType → its number, from 1
	names []string          // by number; names[0] is "" (not known)
	dead  *timingwheel.Index
}

func newCensus() census {
	return census{nums: map[string]uint32{}, names: []string{""}, dead: timingwheel.New(1)}
}

// seriesTag marks the tag of a series' task (Filter.Series); the rest of a tag is its bizType's
// number.
const seriesTag = 1 << 31

// tagOfTask is t's tag: its bizType's number, and whether it is a series.
func (c *Core) tagOfTask(t *record.Task) uint32 {
	if t.Series != nil {
		return c.tagOf(t.BizType) | seriesTag
	}
	return c.tagOf(t.BizType)
}

// tagOf returns bizType's number, giving it one if it has none. Numbers are never taken back:
// a replica sees a bounded set of bizTypes.
func (c *Core) tagOf(biz string) uint32 {
	n, ok := c.census.nums[biz]
	if !ok {
		n = uint32(len(c.census.names))
		c.census.nums[biz] = n
		c.census.names = append(c.census.names, biz)
	}
	return n
}

// keepDead keeps e in the DEAD index if it is DEAD, and takes it out otherwise.
func (c *Core) keepDead(e record.Entry, tag uint32) {
	if e.Task.Status == record.StatusDead {
		c.census.dead.Put(0, timingwheel.Entry{ID: e.Task.ID, Due: e.Task.DueAt, Value: e.Revision, Tag: tag})
		return
	}
	c.census.dead.Remove(e.Task.ID)
}

// keepOwned drops the DEAD records of partitions not owned.
func (s *census) keepOwned(owns func(string) bool) {
	var drop []string
	s.dead.Scan(func(id []byte, _ timingwheel.Entry) bool {
		if k := string(id); !owns(k) {
			drop = append(drop, k)
		}
		return true
	})
	for _, id := range drop {
		s.dead.Remove(id)
	}
}

// Listed is a task as the census knows it: enough to filter, order and read it.
type Listed struct {
	ID      string
	BizType string
	Status  record.Status
	Due     int64 // UTC Unix ms: the record's due time
	Rev     uint64
	Series  bool
}

// before orders by due time, then id.
func (a *Listed) before(b *Listed) bool {
	return a.Due < b.Due || a.Due == b.Due && a.ID < b.ID
}

// scanned is one task in a census scan; id is valid only during the call.
type scanned struct {
	id     []byte
	tag    uint32 // with seriesTag
	status record.Status
	due    int64
	rev    uint64
}

// scan calls fn with every WAITING, RUNNING and DEAD task of the owned partitions, once each.
func (c *Core) scan(fn func(s *scanned)) {
	var s scanned
	c.idx.x.Scan(func(id []byte, e timingwheel.Entry) bool {
		if !c.ownsBytes(id) {
			return true
		}
		s = scanned{id: id, tag: e.Tag, status: record.StatusWaiting, due: e.Due, rev: e.Value}
		switch Kind(e.Kind) {
		case Lease:
			s.status, s.due = record.StatusRunning, c.lim.running[string(id)].at
		case Publish:
			s.status = record.StatusRunning
		default:
			if t := c.tasks[string(id)]; t != nil && t.retry {
				s.due = t.retryDue
			}
		}
		fn(&s)
		return true
	})
	for id, t := range c.tasks {
		if !t.flying || !c.Owns(id) {
			continue
		}
		if _, ok := c.idx.get(id); ok {
			continue
		}
		s = scanned{id: []byte(id), tag: t.fl.tag, status: record.StatusWaiting, due: t.fl.due, rev: t.fl.rev}
		if !t.fl.fire {
			s.status, s.due = record.StatusRunning, c.lim.running[id].at
		}
		fn(&s)
	}
	c.census.dead.Scan(func(id []byte, e timingwheel.Entry) bool {
		s = scanned{id: id, tag: e.Tag, status: record.StatusDead, due: e.Due, rev: e.Value}
		fn(&s)
		return true
	})
}

// ownsBytes is Owns for an id's bytes (record.Partition: FNV-1a 32), without a copy.
func (c *Core) ownsBytes(id []byte) bool {
	h := uint32(2166136261)
	for _, b := range id {
		h = (h ^ uint32(b)) * 16777619
	}
	p := int(h % uint32(c.cfg.Partitions))
	return p < len(c.owned) && c.owned[p]
}

// Filter selects tasks for List: every field set must match.
type Filter struct {
	BizType   string
	Statuses  []record.Status // none: WAITING, RUNNING and DEAD
	DueAfter  int64           // UTC Unix ms, 0: none; due at or after
	DueBefore int64           // UTC Unix ms, 0: none; due before
	IDPrefix  string
	Series    bool // only series
	// After is the cursor: only tasks ordered after it (Listed.before), if its ID is set.
	After Listed
}

func (c *Core) matcher(f *Filter) func(s *scanned) bool {
	want := map[record.Status]bool{}
	for _, st := range f.Statuses {
		want[st] = true
	}
	tag, known := c.census.nums[f.BizType]
	prefix := []byte(f.IDPrefix)
	return func(s *scanned) bool {
		switch {
		case f.BizType != "" && (!known || s.tag&^seriesTag != tag),
			f.Series && s.tag&seriesTag == 0,
			len(want) > 0 && !want[s.status],
			f.DueAfter != 0 && s.due < f.DueAfter,
			f.DueBefore != 0 && s.due >= f.DueBefore,
			!bytes.HasPrefix(s.id, prefix):
			return false
		}
		if f.After.ID != "" {
			if s.due != f.After.Due {
				return s.due > f.After.Due
			}
			return string(s.id) > f.After.ID
		}
		return true
	}
}

// List returns the first limit tasks that f selects, ordered by due time, then id, and the
// number of tasks f selects in all (from the cursor on). It scans every task the core holds,
// keeping only the best limit of them.
func (c *Core) List(f Filter, limit int) (out []Listed, total int) {
	match := c.matcher(&f)
	limit = max(limit, 1)
	var worst *Listed // out's last, once out was cut to limit
	c.scan(func(s *scanned) {
		if !match(s) {
			return
		}
		total++
		if worst != nil && (s.due > worst.Due || s.due == worst.Due && string(s.id) >= worst.ID) {
			return
		}
		l := Listed{ID: string(s.id), BizType: c.census.names[s.tag&^seriesTag], Status: s.status, Due: s.due, Rev: s.rev,
			Series: s.tag&seriesTag != 0}
		if out = append(out, l); len(out) >= 4*limit {
			out, worst = cut(out, limit), &out[limit-1]
		}
	})
	if len(out) > limit {
		out = cut(out, limit)
	}
	sortListed(out)
	return out, total
}

// cut sorts ls and keeps its first n.
func cut(ls []Listed, n int) []Listed {
	sortListed(ls)
	return ls[:n]
}

func sortListed(ls []Listed) {
	slices.SortFunc(ls, func(a, b Listed) int {
		if a.before(&b) {
			return -1
		}
		return 1
	})
}

// Counts is what the census counts of one bizType.
type Counts struct {
	Waiting, Running, Dead int
	// Of the WAITING ones, by due time: overdue (due by now), within a minute, within an hour,
	// later.
	Overdue, Minute, Hour, Later int
	OldestDue                    int64 // UTC Unix ms: the due time of the most overdue, 0 if none
}

// Count counts the tasks of the owned partitions by bizType, scanning what the core holds.
func (c *Core) Count() map[string]Counts {
	byTag := make([]Counts, len(c.census.names))
	now := c.now.Ms
	c.scan(func(s *scanned) {
		n := &byTag[s.tag&^seriesTag]
		switch s.status {
		case record.StatusRunning:
			n.Running++
			return
		case record.StatusDead:
			n.Dead++
			return
		}
		n.Waiting++
		switch d := s.due - now; {
		case d <= 0:
			n.Overdue++
			if n.OldestDue == 0 || s.due < n.OldestDue {
				n.OldestDue = s.due
			}
		case d < 60_000:
			n.Minute++
		case d < 3_600_000:
			n.Hour++
		default:
			n.Later++
		}
	})
	out := map[string]Counts{}
	for tag, n := range byTag {
		if n != (Counts{}) {
			out[c.census.names[tag]] = n
		}
	}
	return out
}
