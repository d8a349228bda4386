package bridge

import "github.com/axbridge/axbridge/timingwheel"

// slots is the loop's index of live tasks, a timingwheel.Index: at most one entry per task id,
// the next step the task is waiting for (a fire, a pre-read or a lease end), keyed by the UTC Unix
// ms at which the step is due. Fire steps (jobFire, jobPreRead) and housekeeping steps (jobLease)
// are kept in two queues so that the loop can take due fires first and stop taking as soon as the
// workers' queue is full (timingwheel's package comment). It is owned by the loop goroutine.
type slots struct{ x *timingwheel.Index }

// slotEntry is an indexed step as the loop sees it.
type slotEntry struct {
	id   string
	due  int64 // UTC Unix ms at which the step is due
	rev  uint64
	kind jobKind
}

// The index's queues.
const (
	heapFire    = 0 // jobFire and jobPreRead
	heapHouse   = 1 // jobLease
	heapPublish = 2 // jobPublish: claimed ahead, published by the loop at the due time
)

func heapOf(k jobKind) int {
	switch k {
	case jobLease:
		return heapHouse
	case jobPublish:
		return heapPublish
	}
	return heapFire
}

func newSlots() *slots { return &slots{x: timingwheel.New(3)} }

func slotOf(e timingwheel.Entry) slotEntry {
	return slotEntry{id: e.ID, due: e.Due, rev: e.Value, kind: jobKind(e.Kind)}
}

// len is the number of indexed tasks.
func (s *slots) len() int { return s.x.Len() }

// get returns the entry of id.
func (s *slots) get(id string) (slotEntry, bool) {
	e, ok := s.x.Get(id)
	return slotOf(e), ok
}

// put indexes id's next step, replacing any entry id had.
func (s *slots) put(id string, due int64, rev uint64, kind jobKind) {
	s.x.Put(heapOf(kind), timingwheel.Entry{ID: id, Due: due, Value: rev, Kind: uint8(kind)})
}

// remove drops id's entry; false if it had none.
func (s *slots) remove(id string) bool { return s.x.Remove(id) }

// peek returns the earliest entry of heap h.
func (s *slots) peek(h int) (slotEntry, bool) {
	e, ok := s.x.Peek(h)
	return slotOf(e), ok
}

// pop removes and returns the earliest entry of heap h (it must not be empty).
func (s *slots) pop(h int) slotEntry {
	e, _ := s.x.Pop(h)
	return slotOf(e)
}

// countDue counts the entries of kind in heap h that are due at or before ms, and returns the
// earliest due time among them.
func (s *slots) countDue(h int, ms int64, kind jobKind) (n int, earliest int64) {
	return s.x.CountDue(h, ms, uint8(kind))
}
