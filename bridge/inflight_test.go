package bridge

import (
	"fmt"
	"testing"

	"github.com/axbridge/axbridge/bridge/internal/sched"

	"github.com/axbridge/axbridge/kvstore"
)

// The fired-attempt cache holds payloads up to its bound (review N6): past it an attempt is kept as
// a stub (revision and claim) that still stops a second publish of it but is not handed to an ack,
// which reads the record instead; what the cache holds is back to 0 once every entry is gone.
func TestInflightBoundedByBytes(t *testing.T) {
	f := newInflight()
	entry := func(i int) kvstore.Entry {
		return kvstore.Entry{Revision: uint64(10 + i), Task: kvstore.Task{ID: fmt.Sprintf("t%d", i), Status: kvstore.StatusRunning,
			Claim: uint64(i + 1), LeaseUntil: 5000, Payload: make([]byte, 1000)}}
	}
	f.max = 2*sched.RecordBytes(&kvstore.Task{ID: "t0", Payload: make([]byte, 1000)}) + 10
	for i := range 4 {
		if v := f.handle(entry(i), 1000); v != publishIt {
			t.Fatalf("handle of t%d: %v, want publishIt", i, v)
		}
	}
	if f.bytes > f.max {
		t.Errorf("the cache holds %d bytes, over its bound of %d", f.bytes, f.max)
	}
	for i := range 4 {
		if f.handle(entry(i), 1000) != handled {
			t.Errorf("the same attempt of t%d was admitted twice", i)
		}
	}
	for i := range 4 {
		e, ok := f.take(fmt.Sprintf("t%d", i), uint64(i+1))
		switch {
		case i < 2 && (!ok || len(e.Task.Payload) != 1000):
			t.Errorf("t%d, within the bound: take %v with %d payload bytes; want the whole record", i, ok, len(e.Task.Payload))
		case i >= 2 && ok:
			t.Errorf("t%d, past the bound: take handed out a stub", i)
		}
	}
	if f.bytes != 0 || len(f.m) != 0 {
		t.Errorf("after every take: %d bytes, %d entries; want 0 and 0", f.bytes, len(f.m))
	}
}

// An attempt is published or given back once per process, whichever path reaches its landed claim
// second (the chaos soak: a second path after the ack took the cached record gave back a
// published attempt, which then fired again at the same attempt number).
func TestInflightHandlesAnAttemptOnce(t *testing.T) {
	f := newInflight()
	e := kvstore.Entry{Revision: 11, Task: kvstore.Task{ID: "t", Status: kvstore.StatusRunning, Claim: 10, LeaseUntil: 5000}}
	if v := f.handle(e, 1000); v != publishIt {
		t.Fatalf("first path within the lease: %v, want publishIt", v)
	}
	if _, ok := f.take("t", 10); !ok {
		t.Fatal("the ack did not find the cached record")
	}
	for _, now := range []int64{2000, 6000} {
		if v := f.handle(e, now); v != handled {
			t.Errorf("second path at %d, after the ack took the record: %v, want handled", now, v)
		}
	}
	g := kvstore.Entry{Revision: 21, Task: kvstore.Task{ID: "g", Status: kvstore.StatusRunning, Claim: 20, LeaseUntil: 5000}}
	if v := f.handle(g, 6000); v != giveItBack {
		t.Fatalf("first path after the lease: %v, want giveItBack", v)
	}
	if v := f.handle(g, 6000); v != handled {
		t.Errorf("second path after a give-back: %v, want handled", v)
	}
	f.drop("t", 12) // the record moved past the claim
	next := kvstore.Entry{Revision: 31, Task: kvstore.Task{ID: "t", Status: kvstore.StatusRunning, Claim: 30, LeaseUntil: 9000}}
	if v := f.handle(next, 7000); v != publishIt {
		t.Errorf("the next attempt of t: %v, want publishIt", v)
	}
	f.sweepAt = 0
	f.handle(kvstore.Entry{Task: kvstore.Task{ID: "x", Claim: 1, LeaseUntil: 1 << 40}}, 5000+sentKeep.Milliseconds()+1)
	if _, ok := f.sent["g"]; ok {
		t.Error("a mark kept past its lease + sentKeep after a sweep")
	}
	if _, ok := f.sent["t"]; !ok {
		t.Error("a sweep dropped the mark of an attempt whose lease runs")
	}
}
