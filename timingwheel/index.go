package timingwheel

import (
	"fmt"
	"hash/maphash"
	"math"
)

// Entry is one indexed step as the caller sees it.
type Entry struct {
	ID  string
	Due int64 // in the caller's unit; the bridge's is UTC Unix ms
	// Value and Kind are the caller's, kept with the entry (the bridge: the record's revision and
	// what the step is). CountDue counts by Kind.
	Value uint64
	Kind  uint8
	// Tag is the caller's too, and costs nothing: it fills what was padding in the entry's node
	// (the bridge: its bizType's number, so that a scan can tell tasks apart).
	Tag uint32
}

// Index is the set of pending entries, at most one per id, in a fixed number of queues. The zero
// value is not usable: call New or NewWheel. It is meant for one owner goroutine.
//
// Nothing in it holds a pointer per entry: the ids are bytes in one arena, found through a map
// from the id's hash to its node, so the garbage collector never walks the entries (it has
// nothing to mark in them), and a map that grows moves 64-bit keys, not strings.
type Index struct {
	byHash map[uint64]int32 // id hash → the node of that id, or the first of those whose ids share the hash
	nodes  slab             // a free node has pos -1, and free ones are chained through next
	free   int32            // first free node, or -1
	n      int              // entries
	queues []queue
	seq    uint32 // insertion counter, for ties in deadline order

	span    int64 // of the wheel in each queue; 0: none, every entry is in far
	cur     int64 // the wheel's first slot is due at cur
	started bool  // Advance was called: until then every entry is in far

	ids        []byte // every entry's id, back to back (node.off, node.len); removed ones stay as garbage
	garbage    int    // bytes of ids that no entry holds: compacted away once they are over half of ids
	compactMin int    // garbage below which ids is never compacted

	seed maphash.Seed
	hash func(id string) uint64 // nil: maphash with seed; tests set one with collisions
}

// node is one entry, 32 bytes; its due time lives in its heap element.
type node struct {
	value uint64
	off   uint32 // its id is ids[off:off+len]
	pos   int32  // position in its heap; -1 while free
	next  int32  // the next node whose id has the same hash, or -1; while free, the next free node
	where int32  // its heap: inFar, inLate, or the index of its slot
	tag   uint32
	len   uint16 // of its id
	kind  uint8
	queue uint8
}

// Limits of the arena's offsets and lengths (the bridge's task ids are at most 200 bytes).
const (
	maxIDLen   = math.MaxUint16
	maxIDBytes = math.MaxUint32
)

// New returns an empty index with the given number of queues, 1 to 256.
func New(queues int) *Index {
	if queues < 1 || queues > 256 {
		panic(fmt.Sprintf("timingwheel: %d queues, want 1 to 256", queues))
	}
	return &Index{byHash: make(map[uint64]int32), free: -1, queues: make([]queue, queues),
		seed: maphash.MakeSeed(), compactMin: 1 << 16}
}

// Len is the number of entries.
func (x *Index) Len() int { return x.n }

func (x *Index) hashString(id string) uint64 {
	if x.hash != nil {
		return x.hash(id)
	}
	return maphash.String(x.seed, id)
}

func (x *Index) hashBytes(id []byte) uint64 {
	if x.hash != nil {
		return x.hash(string(id))
	}
	return maphash.Bytes(x.seed, id) // equal to maphash.String of the same bytes
}

func (x *Index) idOf(n *node) []byte { return x.ids[n.off : int(n.off)+int(n.len)] }

// find returns the node of id, whose hash is h, or -1.
func (x *Index) find(id string, h uint64) int32 {
	i, ok := x.byHash[h]
	if !ok {
		return -1
	}
	for ; i >= 0; i = x.nodes.at(i).next {
		if string(x.idOf(x.nodes.at(i))) == id {
			return i
		}
	}
	return -1
}

func (x *Index) entry(i int32, id string) Entry {
	n := x.nodes.at(i)
	return Entry{ID: id, Due: (*x.heapOf(n))[n.pos].due, Value: n.value, Kind: n.kind, Tag: n.tag}
}

// Get returns the entry of id.
func (x *Index) Get(id string) (Entry, bool) {
	i := x.find(id, x.hashString(id))
	if i < 0 {
		return Entry{}, false
	}
	return x.entry(i, id), true
}

// Put indexes e in queue q, replacing any entry e.ID had (in whichever queue). The index keeps a
// copy of e.ID's bytes of its own: the caller's string may be part of a larger one (a KV key, a
// subject) that would otherwise stay alive for as long as the entry is pending. It panics on an
// id longer than 65,535 bytes, or when the ids of the entries would take more than 4 GiB.
func (x *Index) Put(q int, e Entry) {
	if q < 0 || q >= len(x.queues) {
		panic(fmt.Sprintf("timingwheel: queue %d of %d", q, len(x.queues)))
	}
	h := x.hashString(e.ID)
	i := x.find(e.ID, h)
	if i >= 0 {
		n := x.nodes.at(i)
		x.unlink(n)
		n.value, n.kind, n.queue, n.tag = e.Value, e.Kind, uint8(q), e.Tag
	} else {
		if len(e.ID) > maxIDLen {
			panic(fmt.Sprintf("timingwheel: id of %d bytes, at most %d", len(e.ID), maxIDLen))
		}
		if len(x.ids)+len(e.ID) > maxIDBytes {
			if x.compact(); len(x.ids)+len(e.ID) > maxIDBytes {
				panic("timingwheel: ids of over 4 GiB")
			}
		}
		if x.free >= 0 {
			i = x.free
			x.free = x.nodes.at(i).next
		} else {
			i = x.nodes.add()
		}
		next, ok := x.byHash[h]
		if !ok {
			next = -1
		}
		*x.nodes.at(i) = node{value: e.Value, off: uint32(len(x.ids)), len: uint16(len(e.ID)), next: next, kind: e.Kind, queue: uint8(q), tag: e.Tag}
		x.ids = append(x.ids, e.ID...)
		x.byHash[h] = i
		x.n++
	}
	x.seq++
	x.place(q, elem{due: e.Due, seq: x.seq, i: i})
}

// Remove drops id's entry; false if it had none.
func (x *Index) Remove(id string) bool {
	h := x.hashString(id)
	i := x.find(id, h)
	if i < 0 {
		return false
	}
	x.unlink(x.nodes.at(i))
	x.release(i, h)
	return true
}

// Peek returns the earliest entry of queue q.
func (x *Index) Peek(q int) (Entry, bool) {
	h := x.top(q)
	if len(*h) == 0 {
		return Entry{}, false
	}
	i := (*h)[0].i
	return x.entry(i, string(x.idOf(x.nodes.at(i)))), true
}

// PeekDue returns the due time of the earliest entry of queue q, without copying its id as Peek
// does; false if q is empty.
func (x *Index) PeekDue(q int) (int64, bool) {
	h := x.top(q)
	if len(*h) == 0 {
		return 0, false
	}
	return (*h)[0].due, true
}

// Pop removes and returns the earliest entry of queue q; false if q is empty. The caller decides
// whether it is due: Peek first.
func (x *Index) Pop(q int) (Entry, bool) {
	h := x.top(q)
	if len(*h) == 0 {
		return Entry{}, false
	}
	i := (*h)[0].i
	id := x.idOf(x.nodes.at(i))
	e := x.entry(i, string(id))
	x.unlink(x.nodes.at(i))
	x.release(i, x.hashBytes(id))
	return e, true
}

// PopSlot pops up to max of the entries of queue q that share its earliest due time, in
// insertion order, and calls fn with each; it returns how many. The caller decides whether they
// are due: PeekDue first.
func (x *Index) PopSlot(q, max int, fn func(Entry)) int {
	first, _ := x.PeekDue(q)
	n := 0
	for ; n < max; n++ {
		if due, ok := x.PeekDue(q); !ok || due != first {
			break
		}
		e, _ := x.Pop(q)
		fn(e)
	}
	return n
}

// CountDue counts the entries of kind in queue q that are due at or before t, and returns the
// earliest due time among them (0 if none); it visits only entries due by then (and their
// children in a heap), not the whole queue.
func (x *Index) CountDue(q int, t int64, kind uint8) (n int, earliest int64) {
	qu := &x.queues[q]
	qu.late.countDue(&x.nodes, t, kind, &n, &earliest)
	x.countWheel(qu, t, kind, &n, &earliest)
	qu.far.countDue(&x.nodes, t, kind, &n, &earliest)
	return n, earliest
}

// Scan calls fn with every entry, in no particular order, until fn returns false. The id fn
// sees is the index's own bytes: valid only during the call, and not to be changed. The index
// must not change during a scan.
func (x *Index) Scan(fn func(id []byte, e Entry) bool) {
	for i := range x.nodes.len {
		n := x.nodes.at(i)
		if n.pos < 0 { // free
			continue
		}
		e := Entry{Due: (*x.heapOf(n))[n.pos].due, Value: n.value, Kind: n.kind, Tag: n.tag}
		if !fn(x.idOf(n), e) {
			return
		}
	}
}

// release frees node i, already out of its heap, whose id hashes to h.
func (x *Index) release(i int32, h uint64) {
	n := x.nodes.at(i)
	if head := x.byHash[h]; head == i {
		if n.next >= 0 {
			x.byHash[h] = n.next
		} else {
			delete(x.byHash, h)
		}
	} else {
		p := head
		for x.nodes.at(p).next != i {
			p = x.nodes.at(p).next
		}
		x.nodes.at(p).next = n.next
	}
	x.garbage += int(n.len)
	*n = node{pos: -1, next: x.free}
	x.free = i
	x.n--
	switch {
	case x.n == 0: // let a drained backlog's slab and ids go
		x.nodes.reset()
		x.free, x.ids, x.garbage = -1, x.ids[:0], 0
		if cap(x.ids) > 1<<20 {
			x.ids = nil
		}
	case x.garbage > x.compactMin && x.garbage > len(x.ids)/2:
		x.compact()
	}
}

// compact copies the ids that entries hold into a new arena, leaving the garbage behind: O(live
// bytes), after at least as many bytes were removed.
func (x *Index) compact() {
	ids := make([]byte, 0, len(x.ids)-x.garbage)
	for k := range x.nodes.len {
		n := x.nodes.at(k)
		if n.pos < 0 {
			continue
		}
		off := len(ids)
		ids = append(ids, x.idOf(n)...)
		n.off = uint32(off)
	}
	x.ids, x.garbage = ids, 0
}
