package timingwheel

import "unsafe"

// CollideForTest gives x, still empty, a hash of only buckets values, so that ids share hashes
// and their nodes chain, and has its ids compacted as soon as garbage is over half of them.
func CollideForTest(x *Index, buckets uint64) *Index {
	x.hash = func(id string) uint64 {
		var h uint64
		for i := 0; i < len(id); i++ {
			h = h*31 + uint64(id[i])
		}
		return h % buckets
	}
	x.compactMin = 0
	return x
}

// SetSeqForTest sets the insertion counter, to test its wrap-around.
func SetSeqForTest(x *Index, seq uint32) { x.seq = seq }

// Sizes of one entry's node and heap element.
const (
	NodeSizeForTest = unsafe.Sizeof(node{})
	ElemSizeForTest = unsafe.Sizeof(elem{})
)
