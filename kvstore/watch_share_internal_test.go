package kvstore

import "testing"

// A watch of a large share of the partitions loads from the whole bucket and keeps exactly the
// keys its filters (PartitionFilter) would match; a small share, or all, loads under its filters.
func TestWholeBucketLoadKeepsTheFiltersKeys(t *testing.T) {
	if wholeBucketLoad([]int{0, 1, 2, 3}, 4) != nil {
		t.Error("a watch of every partition: want no key filter (one filter of the bucket)")
	}
	if wholeBucketLoad([]int{3}, 60) != nil {
		t.Error("a watch of 1 of 60 partitions: want it to load under its filter")
	}
	keep := wholeBucketLoad([]int{1, 12, 13, 14, 15, 16, 17, 59}, 60)
	if keep == nil {
		t.Fatal("a watch of 8 of 60 partitions: want a load from the whole bucket")
	}
	for key, want := range map[string]bool{
		"p1.a": true, "p12.task-7": true, "p59.x.y": true,
		"p0.a": false, "p2.a": false, "p01.a": false, "p1.": false, "p1": false, "p60.a": false,
		"p-1.a": false, "q1.a": false, "": false, "p.a": false,
	} {
		if got := keep(key); got != want {
			t.Errorf("keep(%q) = %v, want %v", key, got, want)
		}
	}
}
