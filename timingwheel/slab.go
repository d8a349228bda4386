package timingwheel

import "unsafe"

// Node links. A node lives in exactly one place: a slot list of either wheel
// level, the overdue list, the heap, or the free list.
const (
	nilIdx    int32 = -1 // no node: an empty list's head or tail, the free list's end
	inHeap    int32 = -2 // node.next marker: the node is in the heap, node.prev is its heap position
	zombie    int32 = -3 // node.next marker: removed while in the heap, freed when popped or compacted
	chunkBits       = 10
	chunkSize       = 1 << chunkBits
)

// node is one scheduled entry. v comes first so that a zero-size V adds no
// trailing padding. With V of up to 4 bytes a node is 72 bytes, with 8 bytes 80.
//
// The node keeps its own copy of the id's bytes when they fit (idInline
// bytes, enough for a UUID), so that comparing an id costs no read beyond the
// node: a lookup is one read of the index and one of the node. Longer ids are
// kept in slab.long. The slab then holds no pointers (for a V without
// pointers), so the garbage collector never scans it. The id's hash is not
// kept: a lookup compares the id itself (in the node), and only moving the
// entries to a new index table hashes ids again.
type node[V any] struct {
	v     V
	next  int32  // list successor or listEnd, inHeap, zombie, or free-list link
	prev  int32  // list predecessor or listHead; heap position when in the heap
	gen   uint32 // odd while pending, even while free; bumped on alloc and free
	seq   uint32 // insertion order, assigned on Add and Reschedule
	pos   uint32 // position in the id index
	due   int64  // nanoseconds since start
	idLen uint8  // length of the id in id, or idLong
	id    [idInline]byte
}

const (
	idInline = 39  // id bytes kept in the node
	idLong   = 255 // node.idLen of an id kept in slab.long
)

// slab holds nodes in fixed-size chunks, so growth never copies live nodes
// and never leaves more than one partly used chunk.
type slab[V any] struct {
	chunks []*[chunkSize]node[V]
	used   int32            // nodes handed out so far (high-water mark)
	free   int32            // head of the free list
	long   map[int32]string // ids longer than idInline, by node
}

func (s *slab[V]) at(i int32) *node[V] {
	return &s.chunks[i>>chunkBits][i&(chunkSize-1)]
}

// pop hands out the head of the free list, pending from now on, or nil if
// the list is empty (then fresh hands out a new node). Small enough to
// inline into Add.
func (s *slab[V]) pop() (int32, *node[V]) {
	i := s.free
	if i == nilIdx {
		return nilIdx, nil
	}
	n := s.at(i)
	s.free = n.next
	n.gen++
	return i, n
}

// fresh hands out a node never used before, adding a chunk when the last is
// full. Kept out of line: Add inlines pop, and only rarely needs fresh.
//
//go:noinline
func (s *slab[V]) fresh() (int32, *node[V]) {
	i := s.used
	if int(i>>chunkBits) == len(s.chunks) {
		s.chunks = append(s.chunks, new([chunkSize]node[V]))
	}
	s.used++
	n := s.at(i)
	n.gen = 1
	return i, n
}

// release ends node i's pending life: it forgets its id and value and its
// handles go stale.
func (s *slab[V]) release(i int32) {
	s.retire(i)
	s.push(i)
}

func (s *slab[V]) retire(i int32) {
	n := s.at(i)
	if n.idLen == idLong {
		delete(s.long, i)
	}
	retireNode(n)
}

// retireNode is retire for node n once its id, if long, is out of slab.long.
func retireNode[V any](n *node[V]) {
	var zero V
	n.v = zero
	n.idLen = 0
	n.gen++
}

// setID gives node i (pending, n) the id.
func (s *slab[V]) setID(i int32, n *node[V], id string) {
	if len(id) <= idInline {
		n.idLen = uint8(copy(n.id[:], id))
		return
	}
	if s.long == nil {
		s.long = make(map[int32]string)
	}
	s.long[i] = id
	n.idLen = idLong
}

// hasID reports whether node i (n) holds id.
func (s *slab[V]) hasID(i int32, n *node[V], id string) bool {
	if n.idLen != idLong {
		return int(n.idLen) == len(id) && string(n.id[:n.idLen]) == id
	}
	return s.long[i] == id
}

// push puts a retired node on the free list.
func (s *slab[V]) push(i int32) {
	n := s.at(i)
	n.next = s.free
	n.prev = nilIdx
	s.free = i
}

// idView returns node i's (n) id without copying it: an inline id's string
// aliases the node, so it must not outlive the call that asked for it.
func (s *slab[V]) idView(i int32, n *node[V]) string {
	switch n.idLen {
	case idLong:
		return s.long[i]
	case 0:
		return ""
	}
	return unsafe.String(&n.id[0], int(n.idLen))
}
