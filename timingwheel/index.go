package timingwheel

import (
	"hash/maphash"
	"math/bits"
	"unsafe"
)

// index maps ids to node indexes: open addressing with linear probing over
// two parallel arrays (a table). tags holds one byte per position (empty,
// deleted, or 8 bits of the id's hash); nodes holds the node index at each
// used position.
//
// The tag array is 1/4 the size of nodes and is the only part a probe scans,
// so it stays in cache where a table of wider slots would not: adding a new id
// costs no cache miss on a load (the write into nodes does not stall), and a
// lookup reads one nodes entry and one node per tag match. Deletion leaves a
// tombstone, so entries never move within a table and each node keeps its
// position (node.pos): removing by handle or firing touches only the tag
// byte.
//
// When the used positions of the table (live entries and tombstones) pass
// three quarters, a new table, sized for twice the live entries, takes the
// inserts, and the entries of the old one move into it a few at a time: each
// insert moves the entries among the next few nodes of the slab (moveStep),
// so that the old table is empty long before the new one fills, and no call
// pays for moving them all. Until then a lookup that misses in the current
// table probes the old one. A node's pos carries the bit of the table it is
// in (posTable), so a removal never hashes; a position of the old table
// whose entry has moved is not cleared, so a match there counts only if the
// node's pos still names it.
type index struct {
	seed maphash.Seed
	table
	bit     uint32 // 0 or posTable: the bit positions of the current table carry
	old     table  // the previous table while entries move out of it; else empty
	count   int    // live entries, in both tables
	used    int    // live entries and tombstones of the current table
	oldLive int    // live entries left in old
	move    int32  // next slab node moveStep visits
	step    int    // slab nodes moveStep visits per insert
}

// table is one open-addressing table of the index.
type table struct {
	tags  []uint8
	nodes []int32
	mask  uint32
}

// posTable is the bit of node.pos that names the table a position is in.
// Tables stay far below 1<<31 positions, so no position is unindexed.
const posTable = 1 << 31

const (
	tagEmpty   = 0
	tagDeleted = 1

	minIndexSlots = 16
)

func (x *index) init() {
	x.seed = maphash.MakeSeed()
	x.table = newTable(minIndexSlots)
}

func newTable(n int) table {
	return table{tags: make([]uint8, n), nodes: make([]int32, n), mask: uint32(n - 1)}
}

// moving reports whether entries are still moving out of the old table.
func (x *index) moving() bool { return x.old.tags != nil }

func (x *index) hash(id string) uint32 {
	return uint32(maphash.String(x.seed, id))
}

// prefetchHome starts loading the lines of the current table's tag and node
// index at hash h's home position, without waiting for them.
func (x *index) prefetchHome(h uint32) {
	p := h & x.mask
	prefetch2(unsafe.Pointer(&x.tags[p]), unsafe.Pointer(&x.nodes[p]))
}

// tagOf is the tag byte of hash h: its top 8 bits, never empty or deleted.
func tagOf(h uint32) uint8 {
	return max(uint8(h>>24), 2)
}

// find returns the position and node index of id in the current table, or
// ok=false and the position where id would be inserted (the first tombstone
// on its probe path, else the empty position that ended it). While entries
// move, an id it does not find may be in the old table (findOld). Positions
// are the table's own, without posTable.
func find[V any](x *index, s *slab[V], id string, h uint32) (pos uint32, i int32, ok bool) {
	tag := tagOf(h)
	free := int64(-1)
	for pos = h & x.mask; ; pos = (pos + 1) & x.mask {
		switch t := x.tags[pos]; t {
		case tagEmpty:
			if free >= 0 {
				pos = uint32(free)
			}
			return pos, nilIdx, false
		case tagDeleted:
			if free < 0 {
				free = int64(pos)
			}
		case tag:
			i = x.nodes[pos]
			if s.hasID(i, s.at(i), id) {
				return pos, i, true
			}
		}
	}
}

// lookup returns the node of pending id, in either table.
func lookup[V any](x *index, s *slab[V], id string) (int32, bool) {
	h := x.hash(id)
	x.prefetchHome(h) // see Remove
	if _, i, ok := find(x, s, id, h); ok {
		return i, true
	}
	_, i, ok := findOld(x, s, id, h)
	return i, ok
}

// findOld looks id up in the old table, if entries are moving. A position
// whose entry moved to the current table still holds its tag and node index;
// it matches only if the node's pos still names it.
func findOld[V any](x *index, s *slab[V], id string, h uint32) (pos uint32, i int32, ok bool) {
	if !x.moving() {
		return 0, nilIdx, false
	}
	t := &x.old
	tag := tagOf(h)
	bit := x.bit ^ posTable
	for p := h & t.mask; ; p = (p + 1) & t.mask {
		switch t.tags[p] {
		case tagEmpty:
			return 0, nilIdx, false
		case tag:
			i = t.nodes[p]
			if n := s.at(i); n.pos == p|bit && s.hasID(i, n, id) {
				return p, i, true
			}
		}
	}
}

// findNew is find for an id that is probably not pending: indexing a queued
// entry. It reads eight tags at a time: one load and a few bit operations find
// a group's tag matches, tombstones and first empty position, so probing takes
// one well-predicted branch per group instead of one per position. A lookup
// that usually hits is faster with find: there the predicted match at the home
// position lets the CPU read the node index before the tag arrives, where here
// the position of a match depends on the loaded tags (measured: cancel by id
// about 1.5x slower with this loop).
func findNew[V any](x *index, s *slab[V], id string, h uint32) (pos uint32, i int32, ok bool) {
	tag := tagOf(h)
	free := int64(-1)
	pos = h & x.mask
	for {
		if int(pos)+8 > len(x.tags) {
			// Near the table's end (rare in a large table): probe one tag at a
			// time from the start, which gives the same answer.
			return find(x, s, id, h)
		}
		g := load64(x.tags[pos:])
		path := ^uint64(0) // bytes before the group's first empty one
		if e := zeroBytes(g); e != 0 {
			path = e&-e - 1
		}
		for m := zeroBytes(g^(lowBytes*uint64(tag))) & path; m != 0; m &= m - 1 {
			k := uint32(bits.TrailingZeros64(m) / 8)
			i = x.nodes[pos+k]
			if s.hasID(i, s.at(i), id) {
				return pos + k, i, true
			}
		}
		if d := zeroBytes(g^(lowBytes*tagDeleted)) & path; d != 0 && free < 0 {
			free = int64(pos + uint32(bits.TrailingZeros64(d)/8))
		}
		if path != ^uint64(0) {
			if free >= 0 {
				return uint32(free), nilIdx, false
			}
			return pos + uint32(bits.TrailingZeros64(path+1)/8), nilIdx, false
		}
		pos = (pos + 8) & x.mask
	}
}

const lowBytes = 0x0101010101010101

// load64 is binary.LittleEndian.Uint64, written out (the compiler turns it
// into one load). A generic function compiled for a caller's type argument
// in the caller's package does not inline calls into encoding/binary: the
// wheel's code for Wheel[uint32] in another package called Uint64 once per
// probe, spilling the loop's registers around each call. Calls within this
// package inline there as they do here.
func load64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// zeroBytes has the top bit of each byte of g that is zero set. Above the
// lowest zero byte it may also flag a byte that is one; callers use only the
// lowest flag, or verify each.
func zeroBytes(g uint64) uint64 {
	return (g - lowBytes) &^ g & (lowBytes << 7)
}

// insertAt stores node i with hash h at the position of the current table
// find returned. The caller records pos|bit in the node, then calls grow if
// full reports true.
func (x *index) insertAt(pos uint32, i int32, h uint32) {
	if x.tags[pos] == tagEmpty {
		x.used++
	}
	x.tags[pos] = tagOf(h)
	x.nodes[pos] = i
	x.count++
}

// full reports whether live entries and tombstones of the current table pass
// three quarters.
func (x *index) full() bool { return x.used*4 > len(x.tags)*3 }

// deleteAt removes the entry at a node's pos, of either table.
func (x *index) deleteAt(pos uint32) {
	if pos&posTable != x.bit {
		x.deleteOld(pos &^ posTable)
		return
	}
	x.deleteCur(pos & x.mask)
}

// deleteCur removes the entry at pos of the current table.
func (x *index) deleteCur(pos uint32) {
	x.count--
	x.used -= x.table.clear(pos)
}

// deleteOld removes the entry at pos of the old table, and the old table
// with its last entry.
//
//go:noinline
func (x *index) deleteOld(pos uint32) {
	x.count--
	x.old.clear(pos)
	if x.oldLive--; x.oldLive == 0 {
		x.old = table{}
	}
}

// clear empties position pos and returns how many positions became empty.
// It leaves a tombstone unless the next position is empty, in which case no
// probe passes pos and it and the tombstones just before it become empty.
func (t *table) clear(pos uint32) (emptied int) {
	if t.tags[(pos+1)&t.mask] != tagEmpty {
		t.tags[pos] = tagDeleted
		return 0
	}
	for {
		t.tags[pos] = tagEmpty
		emptied++
		pos = (pos - 1) & t.mask
		if t.tags[pos] != tagDeleted {
			return emptied
		}
	}
}

// grow starts a new current table, at most half full with the live entries,
// when the current one is full. Its entries then move over a few at a time
// (moveStep): nodes of the slab are visited moveAhead times as fast as
// inserts fill the new table, so the old one is empty long before the new
// one could fill. If entries are still moving when it fills anyway (a table
// of a few dozen positions, which one flush of queued entries can fill before
// its move step runs), the index is rebuilt at once.
func grow[V any](x *index, s *slab[V]) {
	n := minIndexSlots
	for n < 2*(x.count+1) {
		n *= 2
	}
	if x.moving() {
		rebuild(x, s, n)
		return
	}
	x.old, x.table = x.table, newTable(n)
	x.bit ^= posTable
	x.oldLive, x.used = x.count, 0
	x.move = 0
	// Entries that move and inserts both take positions: the new table is
	// full after at least n/4 inserts, and the move visits every node of the
	// slab within n/(4*moveAhead).
	x.step = int(int64(s.used)*4*moveAhead/int64(n)) + 1
	if x.oldLive == 0 {
		x.old = table{}
	}
}

// moveAhead is how many times faster than inserts can fill it the move
// empties the old table.
const moveAhead = 2

// moveStep moves the old table's entries among the slab's next budget nodes
// into the current table, rebuildBatch at a time with their positions
// prefetched.
func moveStep[V any](x *index, s *slab[V], budget int) {
	if !x.moving() {
		return
	}
	end := int32(min(int(x.move)+budget, int(s.used)))
	moved, done := reindex(x, s, x.move, end, true)
	x.oldLive -= moved
	if !done {
		// The current table filled before the old one emptied.
		grow(x, s)
		return
	}
	x.move = end
	if end == s.used || x.oldLive == 0 {
		// Every node was visited: none is left in the old table.
		x.old, x.oldLive = table{}, 0
	}
	if x.full() {
		grow(x, s)
	}
}

// rebuild re-creates the index at once from the pending nodes of the slab
// (in slab order, so node reads are sequential), in a table of n positions,
// with no old table.
func rebuild[V any](x *index, s *slab[V], n int) {
	x.table, x.old, x.oldLive, x.used = newTable(n), table{}, 0, 0
	reindex(x, s, 0, s.used, false)
}

// reindex inserts into the current table the indexed pending nodes among
// slab nodes [from, to), only those in the old table if onlyOld, and returns
// how many; done is false if it stopped because the table filled. It
// hashes rebuildBatch nodes at a time, prefetching each one's home position,
// then inserts them: the index's cache misses overlap, where one at a time
// they made a rebuild of 1.5M entries a stall of over 100 ms.
func reindex[V any](x *index, s *slab[V], from, to int32, onlyOld bool) (n int, done bool) {
	var batch [rebuildBatch]pendEntry
	k := 0
	for i := from; i < to; i++ {
		nd := s.at(i)
		if nd.gen&1 == 0 || nd.pos == unindexed || onlyOld && nd.pos&posTable == x.bit {
			continue
		}
		h := x.hash(s.idView(i, nd))
		pos := h & x.mask
		prefetch2(unsafe.Pointer(&x.tags[pos]), unsafe.Pointer(&x.nodes[pos]))
		batch[k] = pendEntry{i, h}
		if k++; k == len(batch) {
			m := reinsert(x, s, batch[:])
			if n += m; m < k {
				return n, false
			}
			k = 0
		}
	}
	m := reinsert(x, s, batch[:k])
	return n + m, m == k
}

// rebuildBatch is how many nodes reindex hashes before inserting them.
const rebuildBatch = 64

// reinsert puts nodes that are in neither table, or only in the old one,
// into the current table, whose probe paths hold none of their ids. It stops
// when the table is full and returns how many it inserted.
func reinsert[V any](x *index, s *slab[V], b []pendEntry) int {
	for k, e := range b {
		if x.full() {
			return k
		}
		pos := e.h & x.mask
		for x.tags[pos] != tagEmpty {
			pos = (pos + 1) & x.mask
		}
		x.tags[pos] = tagOf(e.h)
		x.nodes[pos] = e.i
		x.used++
		s.at(e.i).pos = pos | x.bit
	}
	return len(b)
}
