package bridge

import (
	"io"
	"log/slog"
	"testing"

	"github.com/axbridge/axbridge/kvstore"
)

// A claim taken ahead whose own watch event came before its completion, and whose partition
// moved away in between (reown dropped the task's lease step), is held and fired at its due time
// all the same: it won its CAS, and the new owner waits for its lease (ahead.go).
func TestClaimAheadHeldAfterItsPartitionMoved(t *testing.T) {
	t.Parallel()
	const nparts = 4
	b := &Bridge{nparts: nparts, fired: newInflight(), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	l := &loopState{b: b, idx: newSlots(), near: map[string]*kvstore.Entry{}, flight: map[string]flight{},
		retrying: map[string]int64{}, unsure: map[string]uint64{}, held: map[string]*kvstore.Entry{},
		behind: map[string]int{}, owned: []bool{true, true, true, true}}
	const id = "moved"
	const due, claimRev = 5_000, 8
	claimed := kvstore.Entry{Revision: claimRev, Task: kvstore.Task{ID: id, Status: kvstore.StatusRunning,
		DueAt: due, Claim: 7, LeaseUntil: due + 30_000}}
	// The claim's own watch event: the task's next step is its lease end.
	l.idx.put(id, due+30_000, claimRev, jobLease)
	// The partition moves away: its steps leave the index.
	parts := []bool{true, true, true, true}
	parts[kvstore.Partition(id, nparts)] = false
	l.reown(parts)
	if _, ok := l.idx.get(id); ok {
		t.Fatal("the lost partition's step stayed in the index")
	}
	l.hold(&claimed)
	if l.held[id] == nil {
		t.Fatal("the landed claim was dropped, not held")
	}
	n, ok := l.idx.peek(heapPublish)
	if !ok || n.id != id || n.due != due || n.rev != claimRev {
		t.Fatalf("publish step %+v (%v), want %s at %d, revision %d", n, ok, id, due, claimRev)
	}
}
