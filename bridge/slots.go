package bridge

import "strings"

// slots is the loop's index of live tasks: at most one entry per task id, the next step the task
// is waiting for (a fire, a pre-read or a lease end), keyed by the UTC Unix ms at which the step
// is due. Fire steps and housekeeping steps (lease ends) are kept in two min-heaps so that the loop
// can take due fires first and stop taking as soon as the workers' queue is full: an overdue
// backlog waits here, a few dozen bytes per task, not in a queue.
//
// Keys are wall-clock milliseconds, compared with a fresh reading of the clock every time: the
// index holds no origin that a clock step could invalidate. It is owned by the loop goroutine.
type slots struct {
	byID  map[string]int32 // id → position in nodes
	nodes []slotNode       // slab; free positions are chained through pos
	free  int32            // first free position, or -1
	heaps [2]slotHeap      // heapFire, heapHouse
	seq   uint64           // insertion counter, for ties in deadline order
}

// slotNode is one indexed step; its due time lives in its heap element.
type slotNode struct {
	id   string
	rev  uint64
	pos  int32 // position in its heap; the next free node while free
	kind jobKind
}

// slotEntry is an indexed step as the index's users see it.
type slotEntry struct {
	id   string
	due  int64 // UTC Unix ms at which the step is due
	rev  uint64
	kind jobKind
}

const (
	heapFire  = 0 // jobFire and jobPreRead
	heapHouse = 1 // jobLease
)

func heapOf(k jobKind) int {
	if k == jobLease {
		return heapHouse
	}
	return heapFire
}

func newSlots() *slots { return &slots{byID: make(map[string]int32), free: -1} }

// len is the number of indexed tasks.
func (s *slots) len() int { return len(s.byID) }

func (s *slots) entry(i int32) slotEntry {
	n := &s.nodes[i]
	return slotEntry{id: n.id, due: s.heaps[heapOf(n.kind)][n.pos].due, rev: n.rev, kind: n.kind}
}

// get returns the entry of id.
func (s *slots) get(id string) (slotEntry, bool) {
	i, ok := s.byID[id]
	if !ok {
		return slotEntry{}, false
	}
	return s.entry(i), true
}

// put indexes id's next step, replacing any entry id had.
func (s *slots) put(id string, due int64, rev uint64, kind jobKind) {
	i, ok := s.byID[id]
	if ok {
		n := &s.nodes[i]
		s.heaps[heapOf(n.kind)].removeAt(s.nodes, int(n.pos))
		id = n.id // the map key's string: hold one copy of the id, not one per caller's string
	} else {
		// A copy of its own: the caller's id may be part of a larger string (a KV key, a subject)
		// that the index would otherwise keep alive for as long as the task is pending.
		id = strings.Clone(id)
		if s.free >= 0 {
			i = s.free
			s.free = s.nodes[i].pos
		} else {
			i = int32(len(s.nodes))
			s.nodes = append(s.nodes, slotNode{})
		}
	}
	s.seq++
	s.nodes[i] = slotNode{id: id, rev: rev, kind: kind}
	s.byID[id] = i
	s.heaps[heapOf(kind)].push(s.nodes, heapElem{due: due, seq: s.seq, i: i})
}

// remove drops id's entry; false if it had none.
func (s *slots) remove(id string) bool {
	i, ok := s.byID[id]
	if !ok {
		return false
	}
	n := &s.nodes[i]
	s.heaps[heapOf(n.kind)].removeAt(s.nodes, int(n.pos))
	s.release(i)
	return true
}

// peek returns the earliest entry of heap h.
func (s *slots) peek(h int) (slotEntry, bool) {
	if len(s.heaps[h]) == 0 {
		return slotEntry{}, false
	}
	return s.entry(s.heaps[h][0].i), true
}

// pop removes and returns the earliest entry of heap h (it must not be empty).
func (s *slots) pop(h int) slotEntry {
	i := s.heaps[h][0].i
	e := s.entry(i)
	s.heaps[h].removeAt(s.nodes, 0)
	s.release(i)
	return e
}

// countDue counts the entries of kind in heap h that are due at or before ms, and returns the
// earliest due time among them; it visits only entries due by then (and their children), not the
// whole heap.
func (s *slots) countDue(h int, ms int64, kind jobKind) (n int, earliest int64) {
	hp := s.heaps[h]
	var stack []int
	if len(hp) > 0 {
		stack = append(stack, 0)
	}
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if p >= len(hp) || hp[p].due > ms {
			continue
		}
		if s.nodes[hp[p].i].kind == kind {
			if n == 0 || hp[p].due < earliest {
				earliest = hp[p].due
			}
			n++
		}
		for c := heapArity*p + 1; c <= heapArity*p+heapArity; c++ {
			stack = append(stack, c)
		}
	}
	return n, earliest
}

func (s *slots) release(i int32) {
	delete(s.byID, s.nodes[i].id)
	s.nodes[i] = slotNode{pos: s.free}
	s.free = i
	if len(s.byID) == 0 { // let a drained backlog's slab go
		s.nodes, s.free = s.nodes[:0], -1
		if cap(s.nodes) > 1<<16 {
			s.nodes = nil
		}
	}
}

// heapArity: a 4-ary heap has half the levels of a binary one, and a node's children share
// cache lines.
const heapArity = 4

// heapElem is one heap element: the ordering key inline, so that sifting reads only the heap.
type heapElem struct {
	due int64
	seq uint64
	i   int32 // node
}

func (a heapElem) before(b heapElem) bool {
	if a.due != b.due {
		return a.due < b.due
	}
	return a.seq < b.seq
}

// slotHeap is a 4-ary min-heap ordered by (due, seq); each node knows its position.
type slotHeap []heapElem

func (h slotHeap) set(nodes []slotNode, p int, e heapElem) {
	h[p] = e
	nodes[e.i].pos = int32(p)
}

func (h *slotHeap) push(nodes []slotNode, e heapElem) {
	*h = append(*h, e)
	h.up(nodes, len(*h)-1)
}

func (h *slotHeap) removeAt(nodes []slotNode, p int) {
	last := len(*h) - 1
	if p != last {
		h.set(nodes, p, (*h)[last])
	}
	*h = (*h)[:last]
	if p < last {
		h.down(nodes, p)
		h.up(nodes, p)
	}
	if cap(*h) > 1<<16 && len(*h) < cap(*h)/4 {
		*h = append(slotHeap(nil), *h...)
	}
}

func (h slotHeap) up(nodes []slotNode, p int) {
	e := h[p]
	for p > 0 {
		parent := (p - 1) / heapArity
		if !e.before(h[parent]) {
			break
		}
		h.set(nodes, p, h[parent])
		p = parent
	}
	h.set(nodes, p, e)
}

func (h slotHeap) down(nodes []slotNode, p int) {
	n := len(h)
	e := h[p]
	for {
		first := heapArity*p + 1
		if first >= n {
			break
		}
		c := first
		for k := first + 1; k < first+heapArity && k < n; k++ {
			if h[k].before(h[c]) {
				c = k
			}
		}
		if !h[c].before(e) {
			break
		}
		h.set(nodes, p, h[c])
		p = c
	}
	h.set(nodes, p, e)
}
