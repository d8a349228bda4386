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
			Claim: uint64(i + 1), Payload: make([]byte, 1000)}}
	}
	f.max = 2*sched.RecordBytes(&kvstore.Task{ID: "t0", Payload: make([]byte, 1000)}) + 10
	for i := range 4 {
		if !f.putOnce(entry(i)) {
			t.Fatalf("putOnce of t%d refused", i)
		}
	}
	if f.bytes > f.max {
		t.Errorf("the cache holds %d bytes, over its bound of %d", f.bytes, f.max)
	}
	for i := range 4 {
		if f.putOnce(entry(i)) {
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
