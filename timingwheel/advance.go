package timingwheel

import (
	"math"
	"slices"
	"time"
	"unsafe"
)

// Next returns the earliest time at which Advance may have something to fire
// (an entry's due time, or the slot boundary covering it; never later than the
// earliest due entry), ok=false when empty.
func (w *Wheel[V]) Next() (time.Time, bool) {
	w.flush() // a replaced entry must not count
	w.purgeTop()
	if w.heads[w.overdueList()] != nilIdx {
		return w.abs(w.overdueMin), true
	}
	// Level-0 slots are in tick order from cur; level-1 slots in block order
	// after cur's block; the heap top is its earliest. The three ranges
	// overlap, so Next takes the least.
	earliest := min(w.levelMin(0, w.cur, w.mask0+1), w.levelMin(1, w.cur>>w.shift+1, w.mask))
	if len(w.heap) > 0 {
		earliest = min(earliest, w.slab.at(w.heap[0]).due)
	}
	if earliest == math.MaxInt64 {
		return time.Time{}, false
	}
	return w.abs(earliest), true
}

// levelMin returns listMin of the first slot of a level, among span slots
// from first (a tick for level 0, a block for level 1), that holds a pending
// entry; a slot of zombies only is passed over. MaxInt64 if there is none.
func (w *Wheel[V]) levelMin(level int, first, span int64) int64 {
	size := w.mask0
	if level == 1 {
		size = w.mask
	}
	for s := first; s-first < span; s++ {
		d := w.nextOccupied(level, int(s&size))
		if d < 0 || s+int64(d)-first >= span {
			break
		}
		s += int64(d)
		list, from := int(s&w.mask0), s*w.tick
		if level == 1 {
			list, from = w.level1(s), (s<<w.shift)*w.tick
		}
		if m := w.listMin(list, from); m != math.MaxInt64 {
			return m
		}
	}
	return math.MaxInt64
}

// listMin returns the earliest due time in a slot list whose entries are all
// due after now and at or after from. A short list is scanned for the exact
// value; a long one reports from (after now). Zombies it passes are freed
// (outside Advance), so that Next never scans the same zombies twice: a burst
// of removals costs each Next at most one pass over what it removed.
func (w *Wheel[V]) listMin(list int, from int64) int64 {
	const scanLimit = 64
	earliest := int64(math.MaxInt64)
	i := w.heads[list]
	for k := 0; i >= 0 && k < scanLimit; k++ {
		n := w.slab.at(i)
		next := n.next
		if n.gen&1 == 1 {
			earliest = min(earliest, n.due)
		} else if !w.advancing {
			w.freeZombie(i)
		}
		i = next
	}
	if i >= 0 {
		return max(from, w.now+1)
	}
	return earliest
}

// Advance fires (removes and calls fire for) every entry with due <= now, in
// deadline order (ties in insertion order).
//
// fire may call Add, Remove, Reschedule, Get, Len and Next. An entry that fire
// adds or reschedules with a due time at or before now is fired by the next
// Advance, never by this one, so Advance always terminates. An entry removed
// or rescheduled by fire before its turn in this call does not fire here.
// Advance must not be called from fire; it panics if it is.
//
// Calling Advance with a time earlier than a previous call fires only entries
// due at or before that earlier time.
func (w *Wheel[V]) Advance(now time.Time, fire func(id string, due time.Time, v V)) {
	if w.advancing {
		panic("timingwheel: Advance called from fire")
	}
	w.flush()
	w.advancing = true
	defer w.endAdvance()

	n := w.rel(now)
	w.now = max(w.now, n)
	if w.heads[w.overdueList()] != nilIdx {
		w.fireList(w.overdueList(), n, fire)
	}
	nowTick := w.tickOf(n)
	for w.cur <= nowTick {
		if w.heads[w.level1(w.cur>>w.shift)] != nilIdx {
			w.cascade()
		}
		w.migrate()
		if s := int(w.cur & w.mask0); w.heads[s] != nilIdx {
			w.fireList(s, n, fire)
		}
		if w.cur == nowTick {
			break
		}
		// Every slot before nowTick is empty once processed: jump to the next
		// occupied level-0 slot, the first tick of the next occupied level-1
		// block, the tick of the earliest heap entry, or nowTick.
		next := nowTick
		if d := w.nextOccupied(0, int((w.cur+1)&w.mask0)); d >= 0 {
			next = min(next, w.cur+1+int64(d))
		}
		if d := w.nextOccupied(1, int((w.cur>>w.shift+1)&w.mask)); d >= 0 {
			next = min(next, (w.cur>>w.shift+1+int64(d))<<w.shift)
		}
		if w.purgeTop(); len(w.heap) > 0 {
			next = min(next, w.tickOf(w.slab.at(w.heap[0]).due))
		}
		w.cur = next
	}
	w.precascade()
}

func (w *Wheel[V]) endAdvance() {
	w.advancing = false
	w.maybeSweep()
	if cap(w.batch) > 1<<16 {
		w.batch = nil // do not pin the buffer of a large burst
	}
}

// migrate moves heap entries whose block has come within the level-1
// horizon into their slots. They keep their sequence numbers.
func (w *Wheel[V]) migrate() {
	for w.purgeTop(); len(w.heap) > 0; w.purgeTop() {
		i := w.heap[0]
		n := w.slab.at(i)
		t := w.tickOf(n.due)
		if t>>w.shift-w.cur>>w.shift > w.mask {
			return
		}
		w.heapRemove(0)
		w.file(i, n, t)
	}
}

func compareFire(a, b fireEntry) int {
	if a.due != b.due {
		if a.due < b.due {
			return -1
		}
		return 1
	}
	return int(int32(a.seq - b.seq))
}

// fireList fires the entries of one list that are due at or before n.
//
// A list is newest first. When it is also in descending (due, seq) order, as
// it is whenever entries were added in deadline order (a burst of equal due
// times, a fixed delay), the due entries are its tail: they fire from the
// tail backwards with no sort and no copy. Otherwise (pushList keeps track),
// or if a fire removes or reschedules the entry due next, the remaining due
// entries are collected, sorted and fired by fireSorted. Entries that fire
// adds or reschedules get a sequence number after seq and never fire in the
// same call.
func (w *Wheel[V]) fireList(list int, n int64, fire func(id string, due time.Time, v V)) {
	seq := w.seq
	if w.unsorted[list] {
		w.fireSorted(list, n, seq, fire)
		return
	}
	tail := w.tails[list]
	// ahead runs lookahead entries before i and prefetches the index
	// position each will clear: a hint only (fire may change the list, and
	// for an entry still in an old index table being drained it names a line
	// of the current one), so that the cache misses of upcoming fires overlap.
	const lookahead = 8
	ahead := tail
	for k := 0; k < lookahead && ahead >= 0; k++ {
		ahead = w.slab.at(ahead).prev
	}
	for i := tail; i >= 0; {
		if ahead >= 0 && ahead < w.slab.used {
			a := w.slab.at(ahead)
			t := unsafe.Pointer(&w.index.tags[a.pos&w.index.mask])
			prefetch2(t, t) // one line: the tag byte a fire clears
			ahead = a.prev
		}
		nd := w.slab.at(i)
		if nd.due > n || int32(nd.seq-seq) > 0 {
			return
		}
		p := nd.prev // the entry due next, or a list head marker
		var pseq, pgen uint32
		if p >= 0 {
			pn := w.slab.at(p)
			pseq, pgen = pn.seq, pn.gen
		}
		w.fireNode(i, fire)
		if p < 0 {
			return
		}
		if pn := w.slab.at(p); pn.gen != pgen || pn.seq != pseq || pn.next != listEnd(list) {
			// fire removed or moved the entry due next: fall back.
			w.fireSorted(list, n, seq, fire)
			return
		}
		i = p
	}
}

// fireNode unlinks pending node i, drops it from the index and calls fire;
// a zombie it frees.
func (w *Wheel[V]) fireNode(i int32, fire func(id string, due time.Time, v V)) {
	nd := w.slab.at(i)
	if nd.gen&1 == 0 {
		w.freeZombie(i)
		return
	}
	id, v, due := w.idOf(i, nd), nd.v, nd.due
	w.unlink(i)
	w.index.deleteAt(nd.pos)
	w.slab.release(i)
	if due != w.firedDue {
		// Entries fired together often share a due time (a burst, a
		// millisecond of a fixed delay): convert each due time once.
		w.firedDue, w.firedAt = due, w.abs(due)
	}
	fire(id, w.firedAt, v)
}

// fireSorted fires the entries of a list due at or before n and placed at or
// before sequence number seq, in (due, seq) order.
func (w *Wheel[V]) fireSorted(list int, n int64, seq uint32, fire func(id string, due time.Time, v V)) {
	b := w.batch[:0]
	for i := w.heads[list]; i >= 0; {
		nd := w.slab.at(i)
		next := nd.next
		switch {
		case nd.gen&1 == 0:
			w.freeZombie(i)
		case nd.due <= n && int32(nd.seq-seq) <= 0:
			b = append(b, fireEntry{due: nd.due, seq: nd.seq, idx: i})
		}
		i = next
	}
	slices.Reverse(b) // lists are newest first
	if !slices.IsSortedFunc(b, compareFire) {
		slices.SortFunc(b, compareFire)
	}
	w.batch = b
	for _, e := range b {
		nd := w.slab.at(e.idx)
		if nd.seq != e.seq || nd.gen&1 == 0 && nd.prev == nilIdx {
			continue // rescheduled, or removed and freed, by an earlier fire
		}
		w.fireNode(e.idx, fire) // frees it if an earlier fire made it a zombie
	}
}

// arenaSize is the size of the byte blocks that back fired ids: one
// allocation serves many fires, and a retained id keeps at most one block alive.
const arenaSize = 2048

type arenaBlock [arenaSize]byte

// idOf returns node i's id as a string. An inline id is copied into the
// arena block: bytes of a block are written once, before any string refers
// to them, so the string stays valid after the node is reused.
func (w *Wheel[V]) idOf(i int32, n *node[V]) string {
	if n.idLen == idLong {
		return w.slab.long[i]
	}
	l := int(n.idLen)
	if l == 0 {
		return ""
	}
	off := w.arenaOff
	if w.arena == nil || off+idInline > arenaSize {
		w.arena, off = new(arenaBlock), 0
	}
	// A fixed-size copy (no call); the bytes past l are overwritten by the
	// next id, which no string has seen yet.
	*(*[idInline]byte)(w.arena[off : off+idInline]) = n.id
	w.arenaOff = off + l
	return unsafe.String(&w.arena[off], l)
}
