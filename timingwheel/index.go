package timingwheel

import "hash/maphash"

// index maps ids to node indexes: open addressing with linear probing over
// one array of 64-bit slots. A used slot holds the id's 32-bit hash in its
// high half and the node index plus two in its low half; slotEmpty and
// slotDeleted have a low half below two, so they never equal a used slot.
//
// A probe reads one slot and learns both the full hash and the node, so a
// lookup costs one cache miss in the table and then the node: a previous
// version kept a one-byte tag array beside a separate node-index array, and a
// lookup missed on the tag, then on the node index, then on the node. A hash
// match with another id (one in 2^32 per probe) costs a read of the node and
// its id. Deletion leaves a tombstone, so entries never move and each node
// keeps its position (node.pos): removing by handle or firing touches only
// its slot. The table is rebuilt from the slab when used positions pass
// three quarters.
type index struct {
	seed  maphash.Seed
	slots []uint64
	mask  uint32 // len(slots)-1, a power of two minus one
	count int    // live entries
	used  int    // live entries and tombstones
}

const (
	slotEmpty   = 0
	slotDeleted = 1

	minIndexSlots = 16
)

func (x *index) init() {
	x.seed = maphash.MakeSeed()
	x.alloc(minIndexSlots)
}

func (x *index) alloc(n int) {
	x.slots = make([]uint64, n)
	x.mask = uint32(n - 1)
	x.count, x.used = 0, 0
}

func (x *index) hash(id string) uint32 {
	return uint32(maphash.String(x.seed, id))
}

// home is the first position of hash h's probe path.
func (x *index) home(h uint32) uint32 {
	return h & x.mask
}

// next is the position after pos, cyclically.
func (x *index) next(pos uint32) uint32 {
	return (pos + 1) & x.mask
}

// prev is the position before pos, cyclically.
func (x *index) prev(pos uint32) uint32 {
	return (pos - 1) & x.mask
}

// slotOf is the slot value of node i with hash h.
func slotOf(h uint32, i int32) uint64 {
	return uint64(h)<<32 | uint64(uint32(i)+2)
}

// slotNode is the node index of a used slot.
func slotNode(s uint64) int32 { return int32(uint32(s) - 2) }

// find returns the position and node index of id, or ok=false and the
// position where id would be inserted (the first tombstone on its probe path,
// else the empty position that ended it).
func find[V any](x *index, s *slab[V], id string, h uint32) (pos uint32, i int32, ok bool) {
	free := int64(-1)
	for pos = x.home(h); ; pos = x.next(pos) {
		switch v := x.slots[pos]; {
		case v == slotEmpty:
			if free >= 0 {
				pos = uint32(free)
			}
			return pos, nilIdx, false
		case v == slotDeleted:
			if free < 0 {
				free = int64(pos)
			}
		case uint32(v>>32) == h:
			i = slotNode(v)
			if s.at(i).id == id {
				return pos, i, true
			}
		}
	}
}

// insertAt stores node i with hash h at the position find returned. The
// caller records pos in the node, then calls rebuild if full reports true.
func (x *index) insertAt(pos uint32, i int32, h uint32) {
	if x.slots[pos] == slotEmpty {
		x.used++
	}
	x.slots[pos] = slotOf(h, i)
	x.count++
}

// full reports whether live entries and tombstones pass three quarters.
func (x *index) full() bool { return x.used*4 > len(x.slots)*3 }

// deleteAt removes the entry at pos. It leaves a tombstone unless the next
// position is empty, in which case no probe passes pos and it and the
// tombstones just before it become empty.
func (x *index) deleteAt(pos uint32) {
	x.count--
	if x.slots[x.next(pos)] != slotEmpty {
		x.slots[pos] = slotDeleted
		return
	}
	for {
		x.slots[pos] = slotEmpty
		x.used--
		pos = x.prev(pos)
		if x.slots[pos] != slotDeleted {
			return
		}
	}
}

// rebuild re-creates the index from the pending nodes of the slab (in slab
// order, so node reads are sequential), at most half full, and records each
// node's new position.
func rebuild[V any](x *index, s *slab[V]) {
	n := minIndexSlots
	for n < 2*(x.count+1) {
		n *= 2
	}
	x.alloc(n)
	for i := int32(0); i < s.used; i++ {
		nd := s.at(i)
		if nd.gen&1 == 0 {
			continue
		}
		pos := x.home(nd.hash)
		for x.slots[pos] != slotEmpty {
			pos = x.next(pos)
		}
		x.insertAt(pos, i, nd.hash)
		nd.pos = pos
	}
}
