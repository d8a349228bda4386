package timingwheel

import "hash/maphash"

// index maps ids to node indexes: open addressing with linear probing and
// backward-shift deletion. Each slot packs the low 32 bits of the id's hash
// (upper half) and node index + 1 (lower half); 0 is empty. The hash bits
// give the home slot on rehash and deletion without touching nodes, and
// filter most probes before a string comparison.
type index struct {
	seed  maphash.Seed
	slots []uint64
	mask  uint32
	count int
}

const minIndexSlots = 16

func (x *index) init() {
	x.seed = maphash.MakeSeed()
	x.slots = make([]uint64, minIndexSlots)
	x.mask = minIndexSlots - 1
}

func (x *index) hash(id string) uint32 {
	return uint32(maphash.String(x.seed, id))
}

// find returns the slot position and node index of id, or ok=false and the
// empty position where id would be inserted.
func find[V any](x *index, s *slab[V], id string, h uint32) (pos uint32, i int32, ok bool) {
	pos = h & x.mask
	for {
		e := x.slots[pos]
		if e == 0 {
			return pos, nilIdx, false
		}
		if uint32(e>>32) == h {
			i = int32(uint32(e)) - 1
			if s.at(i).id == id {
				return pos, i, true
			}
		}
		pos = (pos + 1) & x.mask
	}
}

// findNode returns the slot position holding node i with hash h.
func (x *index) findNode(i int32, h uint32) uint32 {
	want := uint64(h)<<32 | uint64(uint32(i)+1)
	pos := h & x.mask
	for x.slots[pos] != want {
		pos = (pos + 1) & x.mask
	}
	return pos
}

// insertAt stores node i at the empty position pos found by find, growing the
// table when it is three quarters full.
func (x *index) insertAt(pos uint32, i int32, h uint32) {
	x.slots[pos] = uint64(h)<<32 | uint64(uint32(i)+1)
	x.count++
	if x.count*4 > len(x.slots)*3 {
		x.grow()
	}
}

func (x *index) grow() {
	old := x.slots
	x.slots = make([]uint64, len(old)*2)
	x.mask = uint32(len(x.slots) - 1)
	for _, e := range old {
		if e == 0 {
			continue
		}
		pos := uint32(e>>32) & x.mask
		for x.slots[pos] != 0 {
			pos = (pos + 1) & x.mask
		}
		x.slots[pos] = e
	}
}

// deleteAt empties position pos and shifts back the entries after it that
// would otherwise become unreachable.
func (x *index) deleteAt(pos uint32) {
	x.count--
	hole := pos
	for {
		pos = (pos + 1) & x.mask
		e := x.slots[pos]
		if e == 0 {
			break
		}
		home := uint32(e>>32) & x.mask
		// Move e into the hole unless its home lies cyclically in (hole, pos].
		if (pos-home)&x.mask >= (pos-hole)&x.mask {
			x.slots[hole] = e
			hole = pos
		}
	}
	x.slots[hole] = 0
}
