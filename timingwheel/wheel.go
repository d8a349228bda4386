package timingwheel

import (
	"fmt"
	"math/bits"
)

// Where a node's element is, when not in a slot (node.where is then the slot's index).
const (
	inFar  = -1
	inLate = -2
)

// maxSpan bounds a wheel: a slot takes 24 bytes in each queue, empty or not.
const maxSpan = 1 << 20

// queue is one queue's entries. With a wheel, those due before cur are in late, those due in
// [cur, cur+span) in the slot of their due time, the rest in far; without one, all are in far.
type queue struct {
	far, late heap
	slots     []heap   // ring: due time t is in slot t mod span; all of a slot's entries share it
	bits      []uint64 // bit k set: slots[k] is not empty
	wheeled   int      // entries in slots
	hint      int64    // no slot of offset below hint from cur holds an entry
}

// NewWheel returns an empty index with the given number of queues, 1 to 256, each with a wheel of
// span slots of one unit each, 1 to 2^20, in front of its heap: see Advance.
func NewWheel(queues int, span int64) *Index {
	if span < 1 || span > maxSpan {
		panic(fmt.Sprintf("timingwheel: span %d, want 1 to %d", span, maxSpan))
	}
	x := New(queues)
	x.span = span
	for q := range x.queues {
		x.queues[q] = x.newQueue()
	}
	return x
}

// newQueue is an empty queue, with a wheel of x.span slots if the index has one.
func (x *Index) newQueue() queue {
	if x.span == 0 {
		return queue{}
	}
	return queue{slots: make([]heap, x.span), bits: make([]uint64, (x.span+63)/64)}
}

// AddQueue adds an empty queue, with a wheel if the index has one, and returns its number; it
// panics past 256 queues.
func (x *Index) AddQueue() int {
	if len(x.queues) >= 256 {
		panic("timingwheel: 256 queues already")
	}
	x.queues = append(x.queues, x.newQueue())
	return len(x.queues) - 1
}

// Queues is the number of queues.
func (x *Index) Queues() int { return len(x.queues) }

// Advance moves the wheel to now, never back: the slots now passed join late, and every entry of
// the far heaps due before now+span moves into its slot (or, if due before now, into late), and
// is reported to entering (if not nil), which must not change the index. The first call sets
// the wheel's start; until then every entry is in far. On an index from New it does nothing.
func (x *Index) Advance(now int64, entering func(Entry)) {
	if x.span == 0 {
		return
	}
	if !x.started {
		x.started, x.cur = true, now
	} else if now > x.cur {
		for q := range x.queues {
			x.passOver(&x.queues[q], uint64(now)-uint64(x.cur))
		}
		x.cur = now
	}
	for q := range x.queues {
		x.pull(q, entering)
	}
}

// inWindow reports whether t is in [cur, cur+span), without overflow.
func (x *Index) inWindow(t int64) bool {
	return t >= x.cur && uint64(t)-uint64(x.cur) < uint64(x.span)
}

func (x *Index) slotOf(t int64) int64 {
	if m := t % x.span; m >= 0 {
		return m
	} else {
		return m + x.span
	}
}

func (x *Index) heapOf(n *node) *heap {
	q := &x.queues[n.queue]
	switch n.where {
	case inFar:
		return &q.far
	case inLate:
		return &q.late
	}
	return &q.slots[n.where]
}

// place puts e, whose node is out of every heap, into its heap in queue q.
func (x *Index) place(q int, e elem) {
	qu, n := &x.queues[q], x.nodes.at(e.i)
	switch {
	case !x.started:
		n.where = inFar
		qu.far.push(&x.nodes, e)
	case e.due < x.cur:
		n.where = inLate
		qu.late.push(&x.nodes, e)
	case x.inWindow(e.due):
		s := x.slotOf(e.due)
		n.where = int32(s)
		qu.slots[s].push(&x.nodes, e)
		qu.bits[s/64] |= 1 << (s % 64)
		qu.wheeled++
		qu.hint = min(qu.hint, e.due-x.cur)
	default:
		n.where = inFar
		qu.far.push(&x.nodes, e)
	}
}

// unlink takes n out of its heap.
func (x *Index) unlink(n *node) {
	switch s := n.where; s {
	case inFar, inLate:
		x.heapOf(n).removeAt(&x.nodes, int(n.pos))
	default:
		qu := &x.queues[n.queue]
		qu.slots[s].removeAt(&x.nodes, int(n.pos))
		qu.wheeled--
		if len(qu.slots[s]) == 0 {
			qu.bits[s/64] &^= 1 << (s % 64)
		}
	}
}

// top is the heap that holds queue q's earliest entry: late, the first slot not empty, or far
// (which may be empty).
func (x *Index) top(q int) *heap {
	qu := &x.queues[q]
	switch {
	case len(qu.late) > 0:
		return &qu.late
	case qu.wheeled > 0:
		off := x.nextOffset(qu, qu.hint)
		qu.hint = off
		return &qu.slots[x.slotOf(x.cur+off)]
	}
	return &qu.far
}

// nextOffset is the offset from cur of the first slot not empty at or after offset from, or span
// if none is.
func (x *Index) nextOffset(qu *queue, from int64) int64 {
	base := x.slotOf(x.cur)
	if k := base + from; k < x.span {
		if s := nextBit(qu.bits, k, x.span); s >= 0 {
			return s - base
		}
		from = x.span - base // the offset of slot 0
	}
	if s := nextBit(qu.bits, base+from-x.span, base); s >= 0 {
		return s + x.span - base
	}
	return x.span
}

// nextBit is the first bit set in set at or after from and before to, or -1.
func nextBit(set []uint64, from, to int64) int64 {
	if from >= to {
		return -1
	}
	w := from / 64
	word := set[w] &^ (1<<(from%64) - 1)
	for word == 0 {
		if w++; w*64 >= to {
			return -1
		}
		word = set[w]
	}
	if s := w*64 + int64(bits.TrailingZeros64(word)); s < to {
		return s
	}
	return -1
}

// passOver moves the entries of the slots of offsets below d from cur into late, for cur to move
// forward by d.
func (x *Index) passOver(qu *queue, d uint64) {
	if qu.wheeled == 0 {
		qu.hint = 0
		return
	}
	end := x.span
	if d < uint64(x.span) {
		end = int64(d)
	}
	off := qu.hint
	for qu.wheeled > 0 && off < end {
		if off = x.nextOffset(qu, off); off >= end {
			break
		}
		x.lateSlot(qu, x.slotOf(x.cur+off))
		off++
	}
	qu.hint = 0
	if qu.wheeled > 0 { // no entry was before off, nor is one now before end
		qu.hint = max(off, end) - end
	}
}

// lateSlot moves the entries of slot s into late.
func (x *Index) lateSlot(qu *queue, s int64) {
	for _, e := range qu.slots[s] {
		x.nodes.at(e.i).where = inLate
		qu.late.push(&x.nodes, e)
	}
	qu.wheeled -= len(qu.slots[s])
	qu.slots[s] = qu.slots[s][:0]
	if cap(qu.slots[s]) > 1<<16 {
		qu.slots[s] = nil
	}
	qu.bits[s/64] &^= 1 << (s % 64)
}

// pull moves the entries of queue q's far heap due before cur+span into their heaps.
func (x *Index) pull(q int, entering func(Entry)) {
	qu := &x.queues[q]
	for len(qu.far) > 0 {
		e := qu.far[0]
		if e.due >= x.cur && !x.inWindow(e.due) {
			break
		}
		qu.far.removeAt(&x.nodes, 0)
		x.place(q, e)
		if entering != nil {
			entering(x.entry(e.i, string(x.idOf(x.nodes.at(e.i)))))
		}
	}
}

// countWheel adds the entries of kind in qu's slots due at or before t to n, as heap.countDue.
func (x *Index) countWheel(qu *queue, t int64, kind uint8, n *int, earliest *int64) {
	if qu.wheeled == 0 || t < x.cur {
		return
	}
	end := x.span
	if d := uint64(t) - uint64(x.cur); d < uint64(x.span) {
		end = int64(d) + 1
	}
	for off := qu.hint; off < end; off++ {
		if off = x.nextOffset(qu, off); off >= end {
			break
		}
		for _, e := range qu.slots[x.slotOf(x.cur+off)] {
			if x.nodes.at(e.i).kind == kind {
				if *n == 0 || e.due < *earliest {
					*earliest = e.due
				}
				*n++
			}
		}
	}
}

// Entering returns the earliest time from which Advance reports the earliest entry of queue q's
// far heap as entering the span (its due time less the span, plus one); false if the far heap is
// empty or the index has no wheel.
func (x *Index) Entering(q int) (int64, bool) {
	qu := &x.queues[q]
	if x.span == 0 || len(qu.far) == 0 {
		return 0, false
	}
	return qu.far[0].due - x.span + 1, true
}
