package sched

import (
	"time"

	"github.com/axbridge/axbridge/timingwheel"
)

// slots is the index of live tasks, a timingwheel.Index: at most one entry per task id, the next
// step the task is waiting for, keyed by the UTC Unix ms at which the step is due. Fire steps
// (Fire), housekeeping steps (Lease) and held fires (Publish) are kept in three queues, so that
// due fires are taken first and taking stops as soon as the job queue is full. Each queue has a
// wheel of 1 ms slots whose span is the pre-read window in front of its heap: a fire entering
// the span is the moment to read its payload (advance).
type slots struct {
	x      *timingwheel.Index
	spanMs int64
}

// slotEntry is an indexed step as the core sees it.
type slotEntry struct {
	id   string
	due  int64 // UTC Unix ms at which the step is due
	rev  uint64
	kind Kind
}

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
	return &slots{x: timingwheel.NewWheel(3, n), spanMs: n}
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
func (s *slots) entering() (int64, bool) { return s.x.Entering(heapFire) }

func slotOf(e timingwheel.Entry) slotEntry {
	return slotEntry{id: e.ID, due: e.Due, rev: e.Value, kind: Kind(e.Kind)}
}

func (s *slots) len() int { return s.x.Len() }

func (s *slots) get(id string) (slotEntry, bool) {
	e, ok := s.x.Get(id)
	return slotOf(e), ok
}

// put indexes id's next step, replacing any entry id had.
func (s *slots) put(id string, due int64, rev uint64, kind Kind) {
	s.x.Put(heapOf(kind), timingwheel.Entry{ID: id, Due: due, Value: rev, Kind: uint8(kind)})
}

func (s *slots) remove(id string) bool { return s.x.Remove(id) }

func (s *slots) peek(h int) (slotEntry, bool) {
	e, ok := s.x.Peek(h)
	return slotOf(e), ok
}

// pop removes and returns the earliest entry of queue h (it must not be empty).
func (s *slots) pop(h int) slotEntry {
	e, _ := s.x.Pop(h)
	return slotOf(e)
}

// countDue counts the entries of kind in queue h that are due at or before ms, and returns the
// earliest due time among them.
func (s *slots) countDue(h int, ms int64, kind Kind) (n int, earliest int64) {
	return s.x.CountDue(h, ms, uint8(kind))
}
