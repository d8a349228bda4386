package timingwheel

import (
	"fmt"
	"math"
)

// check verifies the wheel's internal invariants. Tests call it between
// operations (never from inside fire).
func (w *Wheel[V]) check() error {
	seen, listZombies := 0, 0
	overdue := w.overdueList()
	for list, head := range w.heads {
		prev := listHead(list)
		if (head == nilIdx) != (w.tails[list] == nilIdx) {
			return fmt.Errorf("list %d: head %d, tail %d", list, head, w.tails[list])
		}
		if list < overdue {
			level, slot := 0, list
			if list >= w.l0 {
				level, slot = 1, list-w.l0
			}
			bit := w.occupied[level][slot>>6]&(1<<(slot&63)) != 0
			if bit != (head != nilIdx) {
				return fmt.Errorf("slot %d: occupied bit %v, head %d", list, bit, head)
			}
		} else if head == nilIdx && w.overdueMin != math.MaxInt64 {
			return fmt.Errorf("empty overdue list with overdueMin %d", w.overdueMin)
		}
		var last *node[V]
		for i := head; i >= 0; i = w.slab.at(i).next {
			n := w.slab.at(i)
			if n.prev != prev {
				return fmt.Errorf("node %d: prev %d, want %d", i, n.prev, prev)
			}
			if n.next < 0 && (n.next != listEnd(list) || w.tails[list] != i) {
				return fmt.Errorf("list %d ends at node %d with next %d, tail %d", list, i, n.next, w.tails[list])
			}
			if last != nil && !w.unsorted[list] && (n.due > last.due || n.due == last.due && int32(n.seq-last.seq) > 0) {
				return fmt.Errorf("list %d out of (due, seq) order at node %d but not marked unsorted", list, i)
			}
			prev, last = i, n
			if n.gen&1 == 0 {
				// A zombie: removed, not yet freed. It may sit in a slot
				// Advance has passed; it is never indexed and never fires.
				if n.idLen != 0 {
					return fmt.Errorf("zombie node %d in list %d keeps an id", i, list)
				}
				listZombies++
				continue
			}
			seen++
			if list == overdue {
				if n.due > w.now || n.due < w.overdueMin {
					return fmt.Errorf("overdue node %d due %d, now %d, min %d", i, n.due, w.now, w.overdueMin)
				}
				continue
			}
			t := w.tickOf(n.due)
			if list < w.l0 {
				if n.due <= w.now || t < w.cur || t-w.cur > w.mask0 || int(t&w.mask0) != list {
					return fmt.Errorf("node %d due %d (tick %d) in slot %d, cur %d, now %d", i, n.due, t, list, w.cur, w.now)
				}
				continue
			}
			b, cb := t>>w.shift, w.cur>>w.shift
			if n.due <= w.now || b <= cb || b-cb > w.mask || w.level1(b) != list {
				return fmt.Errorf("node %d due %d (block %d) in level-1 list %d, cur %d (block %d), now %d", i, n.due, b, list, w.cur, cb, w.now)
			}
		}
	}
	zombies := 0
	for pos, i := range w.heap {
		n := w.slab.at(i)
		if n.next == zombie {
			zombies++
			if int(n.prev) != pos || n.gen&1 != 0 {
				return fmt.Errorf("zombie heap[%d] = node %d with prev %d gen %d", pos, i, n.prev, n.gen)
			}
		} else {
			seen++
		}
		if n.next != zombie && (n.next != inHeap || int(n.prev) != pos || n.gen&1 == 0) {
			return fmt.Errorf("heap[%d] = node %d with next %d prev %d gen %d", pos, i, n.next, n.prev, n.gen)
		}
		if t := w.tickOf(n.due); t>>w.shift-w.cur>>w.shift <= w.mask {
			return fmt.Errorf("heap node %d tick %d within the level-1 horizon of cur %d", i, t, w.cur)
		}
		if pos > 0 && w.heapLess(i, w.heap[(pos-1)/4]) {
			return fmt.Errorf("heap order broken at %d", pos)
		}
	}
	if zombies != w.zombies {
		return fmt.Errorf("%d zombies in the heap, counted %d", zombies, w.zombies)
	}
	if listZombies != w.listZombies || w.zombiesOver() && !w.advancing && w.sweepAt < 0 {
		return fmt.Errorf("%d zombies in lists, counted %d, %d pending", listZombies, w.listZombies, w.index.count)
	}
	if seen != w.index.count+len(w.pend) {
		return fmt.Errorf("%d linked nodes, index holds %d and %d are queued", seen, w.index.count, len(w.pend))
	}
	queued := map[int32]bool{}
	for _, e := range w.pend {
		n := w.slab.at(e.i)
		if n.gen&1 == 0 || n.pos != unindexed || queued[e.i] || e.h != w.index.hash(w.slab.idView(e.i, n)) {
			return fmt.Errorf("queued node %d: gen %d pos %d, twice %v, hash %x", e.i, n.gen, n.pos, queued[e.i], e.h)
		}
		queued[e.i] = true
	}
	long := 0
	for i := int32(0); i < w.slab.used; i++ {
		n := w.slab.at(i)
		if n.idLen == idLong && n.gen&1 == 1 {
			long++
			if len(w.slab.long[i]) <= idInline {
				return fmt.Errorf("node %d: long id %q", i, w.slab.long[i])
			}
		} else if _, ok := w.slab.long[i]; ok {
			return fmt.Errorf("node %d (id length %d, gen %d) has a long id", i, n.idLen, n.gen)
		}
	}
	if long != len(w.slab.long) {
		return fmt.Errorf("%d nodes with long ids, %d kept", long, len(w.slab.long))
	}
	x := &w.index
	indexed, used := 0, 0
	for pos, tag := range x.tags {
		if tag == tagEmpty {
			continue
		}
		used++
		if tag == tagDeleted {
			continue
		}
		indexed++
		i := x.nodes[pos]
		n := w.slab.at(i)
		id := w.slab.idView(i, n)
		h := x.hash(id)
		if n.gen&1 == 0 || tag != tagOf(h) || n.pos != uint32(pos)|x.bit {
			return fmt.Errorf("index position %d: node %d gen %d pos %#x id %q", pos, i, n.gen, n.pos, id)
		}
		if p, j, ok := find(x, &w.slab, id, h); !ok || j != i || int(p) != pos {
			return fmt.Errorf("id %q not found at its position %d: %d %d %v", id, pos, p, j, ok)
		}
		if p, j, ok := findNew(x, &w.slab, id, h); !ok || j != i || int(p) != pos {
			return fmt.Errorf("findNew: id %q not found at its position %d: %d %d %v", id, pos, p, j, ok)
		}
	}
	// The old table: a live entry is one whose node still names its position
	// (an entry that moved leaves its position as it was).
	oldLive := 0
	oldBit := x.bit ^ posTable
	for pos, tag := range x.old.tags {
		if tag == tagEmpty || tag == tagDeleted {
			continue
		}
		i := x.old.nodes[pos]
		n := w.slab.at(i)
		if n.gen&1 == 0 || n.pos != uint32(pos)|oldBit {
			continue
		}
		oldLive++
		id := w.slab.idView(i, n)
		h := x.hash(id)
		if tag != tagOf(h) || i < x.move {
			return fmt.Errorf("old index position %d: node %d (move at %d) pos %#x id %q", pos, i, x.move, n.pos, id)
		}
		if _, _, ok := find(x, &w.slab, id, h); ok {
			return fmt.Errorf("id %q of the old table is in the current one too", id)
		}
		if p, j, ok := findOld(x, &w.slab, id, h); !ok || j != i || int(p) != pos {
			return fmt.Errorf("id %q not found at its old position %d: %d %d %v", id, pos, p, j, ok)
		}
		if j, ok := lookup(x, &w.slab, id); !ok || j != i {
			return fmt.Errorf("lookup(%q) = %d %v, want node %d", id, j, ok, i)
		}
	}
	if oldLive != x.oldLive || x.moving() != (oldLive > 0) {
		return fmt.Errorf("%d entries in the old table, counted %d, moving %v", oldLive, x.oldLive, x.moving())
	}
	for i := int32(0); i < w.slab.used; i++ {
		if n := w.slab.at(i); n.gen&1 == 1 && n.pos != unindexed && n.pos&posTable != x.bit && !x.moving() {
			return fmt.Errorf("node %d names the old table (pos %#x), which is gone", i, n.pos)
		}
	}
	for k := range 4 { // absent ids: both probes pick the same insert position
		id := fmt.Sprintf("\x00absent-%d", k)
		h := w.index.hash(id)
		p1, _, ok1 := find(&w.index, &w.slab, id, h)
		p2, _, ok2 := findNew(&w.index, &w.slab, id, h)
		if ok1 || ok2 || p1 != p2 {
			return fmt.Errorf("absent id %q: find %d %v, findNew %d %v", id, p1, ok1, p2, ok2)
		}
	}
	if indexed+oldLive != x.count || used != x.used || x.full() {
		return fmt.Errorf("index count %d used %d of %d, %d+%d live and %d used positions", x.count, x.used, len(x.tags), indexed, oldLive, used)
	}
	return nil
}
