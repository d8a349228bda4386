package timingwheel

import (
	"math"
	"math/bits"
)

// Placement. With S = Slots, an entry due at tick t >= cur lives in
//   - level 0, slot t mod 2S, if t < cur+2S;
//   - else level 1, slot (t>>shift) mod S, if its block t>>shift is at most
//     S-1 blocks after cur's block (a horizon of about 4.6h at 1ms × 4096);
//   - else the heap.
// Level-1 slot b mod S only ever holds entries of block b, and never of cur's
// own block: when cur enters a block, Advance cascades what is left of that
// block's level-1 list into level 0 (cascade), and heap entries move down as
// the horizon reaches them (migrate). Level 0 spans two blocks, so every
// entry of the block after cur's fits there: each Advance moves a bounded
// number of them ahead of time (precascade), and the cascade at the block
// boundary finds the list empty unless Advance was called too rarely to
// finish. Every list operation is O(1).

// place links node i (n, not linked anywhere) where its due time belongs
// and gives it the next insertion sequence number.
func (w *Wheel[V]) place(i int32, n *node[V]) {
	w.seq++
	n.seq = w.seq
	w.put(i, n)
}

// put links node i (n, not linked anywhere, its sequence number set) where
// its due time belongs.
func (w *Wheel[V]) put(i int32, n *node[V]) {
	if n.due <= w.now {
		w.overdueMin = min(w.overdueMin, n.due)
		w.pushList(w.overdueList(), i, n)
		return
	}
	// due > now implies tickOf(due) >= cur.
	w.file(i, n, w.tickOf(n.due))
}

// file links node i (n), due at tick t >= cur, into its level-0 or level-1
// slot, or the heap.
func (w *Wheel[V]) file(i int32, n *node[V], t int64) {
	if list := w.listOf(t); list >= 0 {
		w.pushList(list, i, n)
		return
	}
	w.heapPush(i, n)
}

// listOf is the level-0 or level-1 list of tick t >= cur, or -1 if t is
// beyond level 1 (the heap).
func (w *Wheel[V]) listOf(t int64) int {
	if t-w.cur <= w.mask0 {
		return int(t & w.mask0)
	}
	if b := t >> w.shift; b-w.cur>>w.shift <= w.mask {
		return w.level1(b)
	}
	return -1
}

// wheelList is the list where Add links an entry due at d: listOf its tick,
// or -1 if d <= now (the overdue list) or beyond level 1 (the heap).
func (w *Wheel[V]) wheelList(d int64) int {
	if d <= w.now {
		return -1
	}
	return w.listOf(d / w.tick) // tickOf(d): d > now >= 0
}

// level1 is the list index of the level-1 slot for block b.
func (w *Wheel[V]) level1(b int64) int { return w.l0 + int(b&w.mask) }

func (w *Wheel[V]) setOccupied(list int, on bool) {
	level := 0
	if list >= w.l0 {
		level, list = 1, list-w.l0
	}
	if on {
		w.occupied[level][list>>6] |= 1 << (list & 63)
	} else {
		w.occupied[level][list>>6] &^= 1 << (list & 63)
	}
}

// listHead is node.prev of the first node of a list and listEnd node.next of
// the last: each names the list (headList and endList read it back), so
// unlinking a list's first or last node can update the list's head or tail.
func listHead(list int) int32 { return -int32(list) - 2 }
func listEnd(list int) int32  { return -int32(list) - 4 }
func headList(prev int32) int { return int(-prev - 2) }
func endList(next int32) int  { return int(-next - 4) }

// pushList links node i (n) at the head of a list (lists are newest first).
// A node due before the head, or tied with it and inserted earlier (a
// cascade keeps sequence numbers), marks the list unsorted until it empties.
func (w *Wheel[V]) pushList(list int, i int32, n *node[V]) {
	n.prev = listHead(list)
	if head := w.heads[list]; head != nilIdx {
		w.pushFront(list, i, n, head)
		return
	}
	n.next = listEnd(list)
	w.tails[list] = i
	w.unsorted[list] = false
	if list < w.overdueList() {
		w.setOccupied(list, true)
	}
	w.heads[list] = i
}

// pushFront links node i (n, its prev already listHead(list)) at the head
// of a list whose first node is head. A node due before the head, or tied
// with it and inserted earlier (a cascade keeps sequence numbers), marks the
// list unsorted until it empties; checking the flag first keeps a list of
// random due times from paying an unpredictable comparison on every push.
// Small enough to inline into Add.
func (w *Wheel[V]) pushFront(list int, i int32, n *node[V], head int32) {
	h := w.slab.at(head)
	h.prev = i
	n.next = head
	if !w.unsorted[list] && (n.due < h.due || n.due == h.due && int32(n.seq-h.seq) < 0) {
		w.unsorted[list] = true
	}
	w.heads[list] = i
}

// unlink takes node i out of its list or the heap.
func (w *Wheel[V]) unlink(i int32) {
	n := w.slab.at(i)
	if n.next == inHeap {
		w.heapRemove(int(n.prev))
		return
	}
	next, prev := n.next, n.prev
	if next >= 0 {
		w.slab.at(next).prev = prev
	} else {
		w.tails[endList(next)] = max(prev, nilIdx)
	}
	if prev >= 0 {
		w.slab.at(prev).next = next
		return
	}
	list := headList(prev)
	if next >= 0 {
		w.heads[list] = next
		return
	}
	w.heads[list] = nilIdx
	if list < w.overdueList() {
		w.setOccupied(list, false)
	} else {
		w.overdueMin = math.MaxInt64
	}
}

// takeList empties a list and returns its former head; the nodes keep their
// links to each other (the last one's next is still the list's end marker).
func (w *Wheel[V]) takeList(list int) int32 {
	head := w.heads[list]
	if head == nilIdx {
		return nilIdx
	}
	w.heads[list] = nilIdx
	w.tails[list] = nilIdx
	if list < w.overdueList() {
		w.setOccupied(list, false)
	} else {
		w.overdueMin = math.MaxInt64
	}
	return head
}

// cascade moves the level-1 list of cur's block into level 0. Entries keep
// their sequence numbers.
func (w *Wheel[V]) cascade() {
	for i := w.takeList(w.level1(w.cur >> w.shift)); i >= 0; {
		n := w.slab.at(i)
		next := n.next
		if n.gen&1 == 0 { // a zombie: the list is already detached
			w.slab.push(i)
			w.listZombies--
		} else {
			w.pushList(int(w.tickOf(n.due)&w.mask0), i, n)
		}
		i = next
	}
}

// precascadeLimit bounds the entries one Advance moves ahead of time, so that
// no single call pays for a whole level-1 slot (about 14k entries at one
// million pending over five minutes).
const precascadeLimit = 256

// precascade moves up to precascadeLimit entries of the level-1 list of the
// block after cur's into level 0, where they fit: an entry of block cb+1 is
// due before tick (cb+2)*Slots <= cur+2*Slots.
func (w *Wheel[V]) precascade() {
	list := w.level1(w.cur>>w.shift + 1)
	for k := 0; k < precascadeLimit; k++ {
		i := w.heads[list]
		if i == nilIdx {
			return
		}
		n := w.slab.at(i)
		if n.gen&1 == 0 {
			w.freeZombie(i)
			continue
		}
		w.unlink(i)
		w.pushList(int(w.tickOf(n.due)&w.mask0), i, n)
	}
}

// nextOccupied returns the distance from slot `from` to the first occupied
// slot of a level at or after it (cyclically), or -1 if the level is empty.
func (w *Wheel[V]) nextOccupied(level, from int) int {
	occupied := w.occupied[level]
	words := len(occupied)
	size := w.slots
	if level == 0 {
		size = w.l0
	}
	wi := from >> 6
	word := occupied[wi] &^ (1<<(from&63) - 1)
	for k := 0; k <= words; k++ {
		if word != 0 {
			slot := wi<<6 + bits.TrailingZeros64(word)
			return (slot - from) & (size - 1)
		}
		wi++
		if wi == words {
			wi = 0
		}
		word = occupied[wi]
	}
	return -1
}
