package timingwheel

import "unsafe"

// NewCollidingForTest is New with a hash of only buckets values, so that ids share hashes and
// their nodes chain, and with ids compacted as soon as garbage is over half of them.
func NewCollidingForTest(queues int, buckets uint64) *Index {
	x := New(queues)
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

// NodeSizeForTest is the size of one entry's node.
const NodeSizeForTest = unsafe.Sizeof(node{})
