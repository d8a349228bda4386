package sched

import "github.com/axbridge/axbridge/timingwheel"

// slots is the index of live tasks, a timingwheel.Index: at most one entry per task id, the next
// step the task is waiting for, keyed by the UTC Unix ms at which the step is due. Fire steps
// (Fire, PreRead), housekeeping steps (Lease) and held fires (Publish) are kept in three queues,
// so that due fires are taken first and taking stops as soon as the job queue is full.
type slots struct{ x *timingwheel.Index }

// slotEntry is an indexed step as the core sees it.
type slotEntry struct {
	id   string
	due  int64 // UTC Unix ms at which the step is due
	rev  uint64
	kind Kind
}

// The index's queues.
const (
	heapFire    = 0 // Fire and PreRead
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

func newSlots() *slots { return &slots{x: timingwheel.New(3)} }

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
