package kvstore_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// The default store groups automatically; writes made one at a time never back up, so it sends
// each on its own and never tries batches.
func TestJetStoreAutoShallowWritesGoAlone(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	s := openJetStore(t, js, kvstore.Config{Bucket: newBucketName()})
	if !s.Grouping() {
		t.Fatal("the default store does not group")
	}
	// Long enough for several of the policy's measurement windows (100ms each) to close.
	n := 0
	for start := time.Now(); n < 200 || time.Since(start) < 500*time.Millisecond; n++ {
		id := fmt.Sprintf("alone-%d", n)
		e := mustCreate(t, s, newTask(id))
		if _, err := updateAsync(testContext(t), s, running(id, "r1"), e.Revision); err != nil {
			t.Fatal(err)
		}
	}
	st := s.WriteStats()
	if !st.Auto || st.Batching || st.Probes != 0 || st.Batches != 0 || st.Singles != uint64(n) {
		t.Fatalf("%+v; want automatic, %d single writes, no probe, no batch", st, n)
	}
}

// Writes keep the order they were made in while the mode changes under them, each lands exactly
// once and reports the revision it got.
func TestJetStoreAutoSwitchKeepsOrder(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	// A batch stays open 20ms: the writes made while batching form batches on a loaded machine too.
	s := openJetStore(t, js, kvstore.Config{Bucket: newBucketName(), BatchDelay: 20 * time.Millisecond})
	ctx := testContext(t)
	const n, every = 1200, 100 // the mode flips every 100 writes
	tasks := make([]*kvstore.Task, n)
	revs := make([]uint64, n)
	for i := range n {
		id := fmt.Sprintf("order-%d", i)
		revs[i] = mustCreate(t, s, newTask(id)).Revision
		tasks[i] = running(id, "r1")
	}
	_, lastBefore := streamState(t, js, s)
	before := s.WriteStats()
	chs := make([]chan outcome, n)
	for i := range n {
		if i%every == 0 { // what was made in the other mode is sent, its answers still to come
			if err := kvstore.WaitSentForTest(ctx, s); err != nil {
				t.Fatal(err)
			}
			kvstore.PinSendModeForTest(s, i/every%2 == 1)
		}
		chs[i] = make(chan outcome, 2)
		s.UpdateAsync(ctx, tasks[i], revs[i], func(rev uint64, err error) { chs[i] <- outcome{rev, err} })
	}
	var prev uint64
	for i, ch := range chs {
		o := await(t, ch)
		if o.err != nil {
			t.Fatalf("update %d: %v", i, o.err)
		}
		if o.rev <= prev {
			t.Fatalf("update %d got revision %d after update %d got %d: out of order", i, o.rev, i-1, prev)
		}
		prev = o.rev
		if got := mustGet(t, s, tasks[i].ID); got.Revision != o.rev {
			t.Fatalf("update %s reported revision %d; the record is at %d", tasks[i].ID, o.rev, got.Revision)
		}
	}
	if _, last := streamState(t, js, s); last != lastBefore+n {
		t.Fatalf("%d writes stored, want %d", last-lastBefore, n)
	}
	st := s.WriteStats()
	if st.Batches == before.Batches || st.Singles-before.Singles < n/2 {
		t.Fatalf("%+v: want batches and at least %d single writes", st, n/2)
	}
	for _, ch := range chs {
		if len(ch) != 0 {
			t.Fatal("done called twice")
		}
	}
}

// Batching by its own choice keeps the grouper's rules: a batch refused for one stale revision
// goes out again write by write, the others land once, the stale one is ErrConflict, and two
// writes to one key never share a batch.
func TestJetStoreAutoBatchesFallBack(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	s := openJetStore(t, js, kvstore.Config{Bucket: newBucketName(), BatchDelay: 100 * time.Millisecond})
	kvstore.PinSendModeForTest(s, true)
	ctx := testContext(t)
	const n, stale = 30, 11
	tasks := make([]*kvstore.Task, 0, n+1)
	revs := make([]uint64, 0, n+1)
	for i := range n {
		id := fmt.Sprintf("fallback-%d", i)
		revs = append(revs, mustCreate(t, s, newTask(id)).Revision)
		tasks = append(tasks, running(id, "r1"))
	}
	revs[stale]--
	tasks = append(tasks, running(tasks[0].ID, "r2")) // the same key again, at the same revision
	revs = append(revs, revs[0])
	_, lastBefore := streamState(t, js, s)
	before := s.WriteStats()
	chs := startUpdates(ctx, s, tasks, revs)
	var sameKey int
	for i, ch := range chs {
		o := await(t, ch)
		switch {
		case i == stale:
			if !errors.Is(o.err, kvstore.ErrConflict) {
				t.Errorf("update at a stale revision: %d, %v; want ErrConflict", o.rev, o.err)
			}
		case i == 0 || i == n:
			if o.err == nil {
				sameKey++
			} else if !errors.Is(o.err, kvstore.ErrConflict) {
				t.Errorf("update %d of %s: %v", i, tasks[i].ID, o.err)
			}
		case o.err != nil:
			t.Errorf("update %s: %v", tasks[i].ID, o.err)
		default:
			if got := mustGet(t, s, tasks[i].ID); got.Revision != o.rev {
				t.Errorf("update %s reported revision %d; the record is at %d", tasks[i].ID, o.rev, got.Revision)
			}
		}
	}
	if sameKey != 1 {
		t.Errorf("%d of the two writes to %s landed, want one", sameKey, tasks[0].ID)
	}
	if _, last := streamState(t, js, s); last != lastBefore+n-1 {
		t.Errorf("%d writes stored, want %d", last-lastBefore, n-1)
	}
	if st := s.WriteStats(); st.Rejected == before.Rejected || !st.Batching {
		t.Fatalf("%+v: no batch was refused, or not batching: the test did not test the fallback", st)
	}
}
