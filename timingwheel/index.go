package timingwheel

import (
	"fmt"
	"strings"
)

// Entry is one indexed step as the caller sees it.
type Entry struct {
	ID  string
	Due int64 // in the caller's unit; the bridge's is UTC Unix ms
	// Value and Kind are the caller's, kept with the entry (the bridge: the record's revision and
	// what the step is). CountDue counts by Kind.
	Value uint64
	Kind  uint8
}

// Index is the set of pending entries, at most one per id, in a fixed number of queues. The zero
// value is not usable: call New. It is meant for one owner goroutine.
type Index struct {
	byID   map[string]int32 // id → position in nodes
	nodes  []node           // slab; free positions are chained through pos
	free   int32            // first free position, or -1
	queues []heap
	seq    uint64 // insertion counter, for ties in deadline order
}

// node is one entry; its due time lives in its heap element.
type node struct {
	id    string
	value uint64
	pos   int32 // position in its heap; the next free node while free
	kind  uint8
	queue uint8
}

// New returns an empty index with the given number of queues, 1 to 256.
func New(queues int) *Index {
	if queues < 1 || queues > 256 {
		panic(fmt.Sprintf("timingwheel: %d queues, want 1 to 256", queues))
	}
	return &Index{byID: make(map[string]int32), free: -1, queues: make([]heap, queues)}
}

// Len is the number of entries.
func (x *Index) Len() int { return len(x.byID) }

func (x *Index) entry(i int32) Entry {
	n := &x.nodes[i]
	return Entry{ID: n.id, Due: x.queues[n.queue][n.pos].due, Value: n.value, Kind: n.kind}
}

// Get returns the entry of id.
func (x *Index) Get(id string) (Entry, bool) {
	i, ok := x.byID[id]
	if !ok {
		return Entry{}, false
	}
	return x.entry(i), true
}

// Put indexes e in queue q, replacing any entry e.ID had (in whichever queue). The index keeps a
// copy of e.ID of its own: the caller's may be part of a larger string (a KV key, a subject)
// that would otherwise stay alive for as long as the entry is pending.
func (x *Index) Put(q int, e Entry) {
	if q < 0 || q >= len(x.queues) {
		panic(fmt.Sprintf("timingwheel: queue %d of %d", q, len(x.queues)))
	}
	id := e.ID
	i, ok := x.byID[id]
	if ok {
		n := &x.nodes[i]
		x.queues[n.queue].removeAt(x.nodes, int(n.pos))
		id = n.id // the map key's string: one copy of the id, not one per caller's string
	} else {
		id = strings.Clone(id)
		if x.free >= 0 {
			i = x.free
			x.free = x.nodes[i].pos
		} else {
			i = int32(len(x.nodes))
			x.nodes = append(x.nodes, node{})
		}
	}
	x.seq++
	x.nodes[i] = node{id: id, value: e.Value, kind: e.Kind, queue: uint8(q)}
	x.byID[id] = i
	x.queues[q].push(x.nodes, elem{due: e.Due, seq: x.seq, i: i})
}

// Remove drops id's entry; false if it had none.
func (x *Index) Remove(id string) bool {
	i, ok := x.byID[id]
	if !ok {
		return false
	}
	n := &x.nodes[i]
	x.queues[n.queue].removeAt(x.nodes, int(n.pos))
	x.release(i)
	return true
}

// Peek returns the earliest entry of queue q.
func (x *Index) Peek(q int) (Entry, bool) {
	if len(x.queues[q]) == 0 {
		return Entry{}, false
	}
	return x.entry(x.queues[q][0].i), true
}

// Pop removes and returns the earliest entry of queue q; false if q is empty. The caller decides
// whether it is due: Peek first.
func (x *Index) Pop(q int) (Entry, bool) {
	h := x.queues[q]
	if len(h) == 0 {
		return Entry{}, false
	}
	i := h[0].i
	e := x.entry(i)
	x.queues[q].removeAt(x.nodes, 0)
	x.release(i)
	return e, true
}

// CountDue counts the entries of kind in queue q that are due at or before t, and returns the
// earliest due time among them (0 if none); it visits only entries due by then (and their
// children), not the whole queue.
func (x *Index) CountDue(q int, t int64, kind uint8) (n int, earliest int64) {
	h := x.queues[q]
	var buf [64]int
	stack := buf[:0]
	if len(h) > 0 {
		stack = append(stack, 0)
	}
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if p >= len(h) || h[p].due > t {
			continue
		}
		if x.nodes[h[p].i].kind == kind {
			if n == 0 || h[p].due < earliest {
				earliest = h[p].due
			}
			n++
		}
		for c := arity*p + 1; c <= arity*p+arity; c++ {
			stack = append(stack, c)
		}
	}
	return n, earliest
}

func (x *Index) release(i int32) {
	delete(x.byID, x.nodes[i].id)
	x.nodes[i] = node{pos: x.free}
	x.free = i
	if len(x.byID) == 0 { // let a drained backlog's slab go
		x.nodes, x.free = x.nodes[:0], -1
		if cap(x.nodes) > 1<<16 {
			x.nodes = nil
		}
	}
}
