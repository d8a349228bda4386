package sched

import (
	"testing"

	"github.com/axbridge/axbridge/kvstore/record"
)

// A claim taken ahead whose own watch event came before its completion, and whose partition
// moved away in between (Own dropped the task's lease step), is held and fired at its due time
// all the same: it won its CAS, and the new owner waits for its lease.
func TestClaimAheadHeldAfterItsPartitionMoved(t *testing.T) {
	t.Parallel()
	const nparts = 4
	c := New(Config{Partitions: nparts}, []int{0, 1, 2, 3}, Time{})
	const id = "moved"
	const due, claimRev = 5_000, 8
	claimed := record.Entry{Revision: claimRev, Task: record.Task{ID: id, Status: record.StatusRunning,
		DueAt: due, Claim: 7, LeaseUntil: due + 30_000}}
	// The claim's own watch event: the task's next step is its lease end.
	c.idx.put(id, due+30_000, claimRev, Lease, 0)
	// The partition moves away: its steps leave the index.
	parts := []bool{true, true, true, true}
	parts[record.Partition(id, nparts)] = false
	c.Own(parts)
	if _, ok := c.idx.get(id); ok {
		t.Fatal("the lost partition's step stayed in the index")
	}
	c.Result(Result{ID: id, Rev: claimRev, Kind: Publish, Held: &claimed})
	if c.Held() != 1 {
		t.Fatal("the landed claim was dropped, not held")
	}
	n, ok := c.idx.peek(heapPublish)
	if !ok || n.id != id || n.due != due || n.rev != claimRev {
		t.Fatalf("publish step %+v (%v), want %s at %d, revision %d", n, ok, id, due, claimRev)
	}
	c.Now(Time{Ms: due})
	c.Take(true, true)
	if rd := c.Ready(); len(rd.Publish) != 1 || rd.Publish[0].Revision != claimRev {
		t.Fatalf("at the due time Ready publishes %+v, want the held claim", rd.Publish)
	}
}
