package sched

import (
	"hash/maphash"
	"time"

	"github.com/axbridge/axbridge/timingwheel"
)

// slots is the index of live tasks, a timingwheel.Index: at most one entry per task id, the next
// step the task is waiting for, keyed by the UTC Unix ms at which the step is due. Fire steps
// (Fire), housekeeping steps (Lease) and held fires (Publish) are kept in three queues, so that
// due fires are taken first and taking stops as soon as the job queue is full. Each queue has a
// wheel of 1 ms slots whose span is the pre-read window in front of its heap: a fire entering
// the span is the moment to read its payload (advance).
//
// Fires wait in lanes, one queue per bizType (laneOf), which popDue takes in turn: one bizType's
// backlog of due fires does not hold back another's (issue 25, isolation).
type slots struct {
	x      *timingwheel.Index
	spanMs int64
	lanes  map[string]int  // bizType → its fire queue
	fireQs []int           // the fire queues: heapFire (no bizType known) first, then by arrival
	shared map[string]bool // bizTypes past maxLanes, whose lane others share
	rr     int             // popDue's next position in fireQs
}

// slotEntry is an indexed step as the core sees it.
type slotEntry struct {
	id   string
	due  int64 // UTC Unix ms at which the step is due
	rev  uint64
	kind Kind
	q    int    // its queue
	tag  uint32 // its bizType's number (Core.tagOf), 0 if not known
}

// maxLanes bounds the fire queues; past it, bizTypes share them (by hash). A lane's wheel costs
// 24 bytes per ms of the pre-read window.
const maxLanes = 64

// The index's queues.
const (
	heapFire    = 0 // Fire
	heapHouse   = 1 // Lease
	heapPublish = 2 // Publish: claimed ahead, published at the due time
)

func heapOf(k Kind) int {
	switch k {
	case Lease:
		return heapHouse
	case Publish:
		return heapPublish
	}
	return heapFire
}

// maxSpan bounds the wheel: a longer pre-read window is read ahead within its last maxSpan only.
const maxSpan = time.Minute

// newSlots returns an empty index whose wheels span window, both ends in (whole ms, at most
// maxSpan): a fire due at now+window is read ahead at now.
func newSlots(window time.Duration) *slots {
	span := (min(window, maxSpan) + time.Millisecond - 1) / time.Millisecond
	n := max(int64(span), 0) + 1
	return &slots{x: timingwheel.NewWheel(3, n), spanMs: n, lanes: map[string]int{}, fireQs: []int{heapFire}, shared: map[string]bool{}}
}

// laneOf is bizType's fire queue, added on first sight.
func (s *slots) laneOf(bizType string) int {
	if bizType == "" {
		return heapFire
	}
	if q, ok := s.lanes[bizType]; ok {
		return q
	}
	var q int
	if len(s.fireQs) < maxLanes {
		q = s.x.AddQueue()
		s.fireQs = append(s.fireQs, q)
	} else {
		q = s.fireQs[1+int(maphash.String(laneSeed, bizType)%uint64(len(s.fireQs)-1))]
		s.shared[bizType] = true
	}
	s.lanes[bizType] = q
	return q
}

// dedicate is bizType's fire queue, one of its own even past maxLanes: a bizType with limits
// has one. Its fires already indexed in a shared lane stay there.
func (s *slots) dedicate(bizType string) int {
	if q, ok := s.lanes[bizType]; ok && !s.shared[bizType] {
		return q
	}
	delete(s.shared, bizType)
	q := s.x.AddQueue()
	s.fireQs = append(s.fireQs, q)
	s.lanes[bizType] = q
	return q
}

var laneSeed = maphash.MakeSeed()

// sameLanes gives s the lanes of old (s is new and empty), so that entries keep their queues.
func (s *slots) sameLanes(old *slots) {
	for s.x.Queues() < old.x.Queues() {
		s.x.AddQueue()
	}
	s.lanes, s.fireQs, s.shared = old.lanes, old.fireQs, old.shared
}

// isFireQ reports whether queue q holds fires.
func (s *slots) isFireQ(q int) bool { return q != heapHouse && q != heapPublish }

// popDue pops a fire due by ms, from the lanes open says may give one, in turn; false if none
// is due.
func (s *slots) popDue(ms int64, open func(q int) bool) (slotEntry, bool) {
	n := len(s.fireQs)
	for k := range n {
		i := (s.rr + k) % n
		q := s.fireQs[i]
		if due, ok := s.x.PeekDue(q); ok && due <= ms && open(q) {
			s.rr = (i + 1) % n
			return s.pop(q), true
		}
	}
	return slotEntry{}, false
}

// nextFire is the earliest time any fire can be taken, by opensAt (a lane's limits may put it
// after the fire's due time, or off); false if there is none.
func (s *slots) nextFire(opensAt func(q int, due int64) (int64, bool)) (earliest int64, ok bool) {
	for _, q := range s.fireQs {
		due, has := s.x.PeekDue(q)
		if has {
			due, has = opensAt(q, due)
		}
		if has && (!ok || due < earliest) {
			earliest, ok = due, true
		}
	}
	return earliest, ok
}

// countFires counts the fires due at or before ms, and returns the earliest due time among them;
// those of the lanes skip says are counted apart (skipped).
func (s *slots) countFires(ms int64, skip func(q int) bool) (n int, earliest int64, skipped int) {
	for _, q := range s.fireQs {
		m, e := s.countDue(q, ms, Fire)
		if skip(q) {
			skipped += m
			continue
		}
		if m > 0 && (n == 0 || e < earliest) {
			earliest = e
		}
		n += m
	}
	return n, earliest, skipped
}

// inSpan reports whether a step due at due is within the span from ms: its payload is read now,
// not as it enters.
func (s *slots) inSpan(due, ms int64) bool { return due < ms+s.spanMs }

// advance moves the wheels to ms and calls entering with each fire step that entered the span.
func (s *slots) advance(ms int64, entering func(id string)) {
	s.x.Advance(ms, func(e timingwheel.Entry) {
		if Kind(e.Kind) == Fire {
			entering(e.ID)
		}
	})
}

// entering is when the next fire step enters the span; false if none is beyond it.
func (s *slots) entering() (at int64, ok bool) {
	for _, q := range s.fireQs {
		if t, has := s.x.Entering(q); has && (!ok || t < at) {
			at, ok = t, true
		}
	}
	return at, ok
}

func slotOf(e timingwheel.Entry, q int) slotEntry {
	return slotEntry{id: e.ID, due: e.Due, rev: e.Value, kind: Kind(e.Kind), q: q, tag: e.Tag}
}

func (s *slots) len() int { return s.x.Len() }

func (s *slots) get(id string) (slotEntry, bool) {
	e, ok := s.x.Get(id)
	return slotOf(e, -1), ok
}

// put indexes id's next step, replacing any entry id had; a fire goes to the lane of no bizType.
// tag is the number of the task's bizType (Core.tagOf).
func (s *slots) put(id string, due int64, rev uint64, kind Kind, tag uint32) {
	s.putIn(heapOf(kind), id, due, rev, kind, tag)
}

// putIn is put into queue q: a fire's lane.
func (s *slots) putIn(q int, id string, due int64, rev uint64, kind Kind, tag uint32) {
	s.x.Put(q, timingwheel.Entry{ID: id, Due: due, Value: rev, Kind: uint8(kind), Tag: tag})
}

func (s *slots) remove(id string) bool { return s.x.Remove(id) }

func (s *slots) peek(h int) (slotEntry, bool) {
	e, ok := s.x.Peek(h)
	return slotOf(e, h), ok
}

// pop removes and returns the earliest entry of queue h (it must not be empty).
func (s *slots) pop(h int) slotEntry {
	e, _ := s.x.Pop(h)
	return slotOf(e, h)
}

// countDue counts the entries of kind in queue h that are due at or before ms, and returns the
// earliest due time among them.
func (s *slots) countDue(h int, ms int64, kind Kind) (n int, earliest int64) {
	return s.x.CountDue(h, ms, uint8(kind))
}
