package bridge

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
	nodes []slotNode       // slab; free positions are chained through heap
	free  int32            // first free position, or -1
	heaps [2]slotHeap      // heapFire, heapHouse
	seq   uint64           // insertion counter, for ties in deadline order
}

// slotNode is one indexed step.
type slotNode struct {
	id   string
	due  int64 // UTC Unix ms at which the step is due
	rev  uint64
	seq  uint64
	kind jobKind
	pos  int32 // position in its heap; the next free node while free
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

// get returns the entry of id.
func (s *slots) get(id string) (slotNode, bool) {
	i, ok := s.byID[id]
	if !ok {
		return slotNode{}, false
	}
	return s.nodes[i], true
}

// put indexes id's next step, replacing any entry id had.
func (s *slots) put(id string, due int64, rev uint64, kind jobKind) {
	s.remove(id)
	var i int32
	if s.free >= 0 {
		i = s.free
		s.free = s.nodes[i].pos
	} else {
		i = int32(len(s.nodes))
		s.nodes = append(s.nodes, slotNode{})
	}
	s.seq++
	s.nodes[i] = slotNode{id: id, due: due, rev: rev, seq: s.seq, kind: kind}
	s.byID[id] = i
	s.heaps[heapOf(kind)].push(s.nodes, i)
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
func (s *slots) peek(h int) (slotNode, bool) {
	if len(s.heaps[h]) == 0 {
		return slotNode{}, false
	}
	return s.nodes[s.heaps[h][0]], true
}

// pop removes and returns the earliest entry of heap h (it must not be empty).
func (s *slots) pop(h int) slotNode {
	i := s.heaps[h][0]
	n := s.nodes[i]
	s.heaps[h].removeAt(s.nodes, 0)
	s.release(i)
	return n
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
		if p >= len(hp) {
			continue
		}
		nd := &s.nodes[hp[p]]
		if nd.due > ms {
			continue
		}
		if nd.kind == kind {
			if n == 0 || nd.due < earliest {
				earliest = nd.due
			}
			n++
		}
		stack = append(stack, 2*p+1, 2*p+2)
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

// slotHeap is a binary min-heap of node positions ordered by (due, seq).
type slotHeap []int32

func less(nodes []slotNode, a, b int32) bool {
	x, y := &nodes[a], &nodes[b]
	if x.due != y.due {
		return x.due < y.due
	}
	return x.seq < y.seq
}

func (h *slotHeap) set(nodes []slotNode, p int, i int32) {
	(*h)[p] = i
	nodes[i].pos = int32(p)
}

func (h *slotHeap) push(nodes []slotNode, i int32) {
	*h = append(*h, i)
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

func (h *slotHeap) up(nodes []slotNode, p int) {
	i := (*h)[p]
	for p > 0 {
		parent := (p - 1) / 2
		if !less(nodes, i, (*h)[parent]) {
			break
		}
		h.set(nodes, p, (*h)[parent])
		p = parent
	}
	h.set(nodes, p, i)
}

func (h *slotHeap) down(nodes []slotNode, p int) {
	n := len(*h)
	i := (*h)[p]
	for {
		c := 2*p + 1
		if c >= n {
			break
		}
		if c+1 < n && less(nodes, (*h)[c+1], (*h)[c]) {
			c++
		}
		if !less(nodes, (*h)[c], i) {
			break
		}
		h.set(nodes, p, (*h)[c])
		p = c
	}
	h.set(nodes, p, i)
}
