package timingwheel

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"unsafe"
)

// index maps ids to node indexes: open addressing with linear probing over
// two parallel arrays. tags holds one byte per position (empty, deleted, or
// 8 bits of the id's hash); nodes holds the node index at each used position.
//
// The tag array is 1/4 the size of nodes and is the only part a probe scans,
// so it stays in cache where a table of wider slots would not: adding a new id
// costs no cache miss on a load (the write into nodes does not stall), and a
// lookup reads one nodes entry and one node per tag match. Deletion leaves a
// tombstone, so entries never move and each node keeps its position
// (node.pos): removing by handle or firing touches only the tag byte. The
// table is rebuilt from the slab when used positions pass three quarters.
type index struct {
	seed  maphash.Seed
	tags  []uint8
	nodes []int32
	mask  uint32
	count int // live entries
	used  int // live entries and tombstones
}

const (
	tagEmpty   = 0
	tagDeleted = 1

	minIndexSlots = 16
)

func (x *index) init() {
	x.seed = maphash.MakeSeed()
	x.alloc(minIndexSlots)
}

func (x *index) alloc(n int) {
	x.tags = make([]uint8, n)
	x.nodes = make([]int32, n)
	x.mask = uint32(n - 1)
	x.count, x.used = 0, 0
}

func (x *index) hash(id string) uint32 {
	return uint32(maphash.String(x.seed, id))
}

// tagOf is the tag byte of hash h: its top 8 bits, never empty or deleted.
func tagOf(h uint32) uint8 {
	return max(uint8(h>>24), 2)
}

// find returns the position and node index of id, or ok=false and the
// position where id would be inserted (the first tombstone on its probe path,
// else the empty position that ended it).
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
		g := binary.LittleEndian.Uint64(x.tags[pos:])
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

// zeroBytes has the top bit of each byte of g that is zero set. Above the
// lowest zero byte it may also flag a byte that is one; callers use only the
// lowest flag, or verify each.
func zeroBytes(g uint64) uint64 {
	return (g - lowBytes) &^ g & (lowBytes << 7)
}

// insertAt stores node i with hash h at the position find returned. The
// caller records pos in the node, then calls rebuild if full reports true.
func (x *index) insertAt(pos uint32, i int32, h uint32) {
	if x.tags[pos] == tagEmpty {
		x.used++
	}
	x.tags[pos] = tagOf(h)
	x.nodes[pos] = i
	x.count++
}

// full reports whether live entries and tombstones pass three quarters.
func (x *index) full() bool { return x.used*4 > len(x.tags)*3 }

// deleteAt removes the entry at pos. It leaves a tombstone unless the next
// position is empty, in which case no probe passes pos and it and the
// tombstones just before it become empty.
func (x *index) deleteAt(pos uint32) {
	x.count--
	if x.tags[(pos+1)&x.mask] != tagEmpty {
		x.tags[pos] = tagDeleted
		return
	}
	for {
		x.tags[pos] = tagEmpty
		x.used--
		pos = (pos - 1) & x.mask
		if x.tags[pos] != tagDeleted {
			return
		}
	}
}

// rebuild re-creates the index from the pending nodes of the slab (in slab
// order, so node reads are sequential), at most half full, and records each
// node's new position. It hashes rebuildBatch nodes at a time, prefetching
// each one's home position, then inserts them: the index's cache misses
// overlap, where one at a time they made a rebuild of 1.5M entries a stall
// of over 100 ms.
func rebuild[V any](x *index, s *slab[V]) {
	n := minIndexSlots
	for n < 2*(x.count+1) {
		n *= 2
	}
	x.alloc(n)
	var batch [rebuildBatch]pendEntry
	k := 0
	for i := int32(0); i < s.used; i++ {
		nd := s.at(i)
		if nd.gen&1 == 0 || nd.pos == unindexed {
			continue
		}
		h := x.hash(s.idView(i, nd))
		pos := h & x.mask
		prefetch2(unsafe.Pointer(&x.tags[pos]), unsafe.Pointer(&x.nodes[pos]))
		batch[k] = pendEntry{i, h}
		if k++; k == len(batch) {
			reinsert(x, s, batch[:])
			k = 0
		}
	}
	reinsert(x, s, batch[:k])
}

// rebuildBatch is how many nodes rebuild hashes before inserting them.
const rebuildBatch = 64

// reinsert puts nodes into an index being rebuilt: it holds no tombstones and
// none of their ids.
func reinsert[V any](x *index, s *slab[V], b []pendEntry) {
	for _, e := range b {
		pos := e.h & x.mask
		for x.tags[pos] != tagEmpty {
			pos = (pos + 1) & x.mask
		}
		x.insertAt(pos, e.i, e.h)
		s.at(e.i).pos = pos
	}
}
