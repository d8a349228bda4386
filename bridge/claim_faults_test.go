package bridge_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/faultstore"
	"github.com/axbridge/axbridge/kvstore"
)

// A claim whose outcome is unknown, and whose read-back keeps failing until after the lease it
// would have had, is not dropped: once the store answers again the task is claimed and fires.
func TestClaimUnknownOutcomeOutlastsLease(t *testing.T) {
	t.Parallel()
	fe := newFaultEnv(t)
	fires := fe.fires("slow")
	fe.store.Inject(faultstore.Rule{Op: faultstore.OpUpdate, ID: "a", Mode: faultstore.FailBefore, Times: 1, Err: context.DeadlineExceeded})
	fe.store.Inject(faultstore.Rule{Op: faultstore.OpGet, ID: "a", Mode: faultstore.FailBefore})
	now := time.Now().UnixMilli()
	if _, err := fe.mem.Create(context.Background(), &kvstore.Task{ID: "a", BizType: "slow", Payload: []byte("p"),
		Status: kvstore.StatusWaiting, DueAt: now, MaxRetry: 3, AckWait: 500 * time.Millisecond, CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	// The outage outlasts the 500ms lease the claim would have had.
	start := time.Now()
	if !bridge.CheckFor(10*time.Second, func() bool { return fe.store.Calls(faultstore.OpGet) >= 2 && time.Since(start) > 2*time.Second }) {
		t.Fatalf("the claim was not read back: %d reads", fe.store.Calls(faultstore.OpGet))
	}
	fe.store.Clear()
	m := next(t, fires)
	if got := m.Header.Get(bridge.HeaderAttempt); got != "1" {
		t.Errorf("fired at attempt %s, want 1", got)
	}
}

// behindStore answers the first Get of an id with what the test put in stale (an older revision
// the stream leader still had, or none): a read that lags the watch.
type behindStore struct {
	*faultstore.Store
	mu    sync.Mutex
	stale map[string]*kvstore.Entry // nil entry: not found
}

func (s *behindStore) lag(id string, e *kvstore.Entry) {
	s.mu.Lock()
	s.stale[id] = e
	s.mu.Unlock()
}

func (s *behindStore) Get(ctx context.Context, id string) (kvstore.Entry, error) {
	s.mu.Lock()
	e, ok := s.stale[id]
	delete(s.stale, id)
	s.mu.Unlock()
	switch {
	case ok && e == nil:
		return kvstore.Entry{}, fmt.Errorf("get %s: %w", id, kvstore.ErrNotFound)
	case ok:
		return *e, nil
	}
	return s.Store.Get(ctx, id)
}

// A fire whose read lags the revision the watch delivered (an older RUNNING revision, or no
// record yet) reads again soon instead of dropping the task.
func TestFireReadBehindTheWatch(t *testing.T) {
	t.Parallel()
	var bs *behindStore
	// No pre-read: every fire reads its record.
	fe := newFaultEnvCfg(t, func(s *faultstore.Store) bridge.Store {
		bs = &behindStore{Store: s, stale: make(map[string]*kvstore.Entry)}
		return bs
	}, bridge.Config{MaxPreReadBytes: 1})
	fires := fe.fires("behind")
	ctx := context.Background()
	now := time.Now().UnixMilli()
	// b: another replica's RUNNING attempt ends by a nak to WAITING, due now; the first read
	// still shows the RUNNING revision.
	running := kvstore.Task{ID: "b", BizType: "behind", Payload: make([]byte, 8), Status: kvstore.StatusRunning,
		Attempt: 1, Claim: 1, Owner: "other", LeaseUntil: now + time.Hour.Milliseconds(), DueAt: now, MaxRetry: 3,
		AckWait: time.Hour, CreatedAt: now, UpdatedAt: now}
	old, err := fe.mem.Create(ctx, &running)
	if err != nil {
		t.Fatal(err)
	}
	bs.lag("b", &old)
	waiting := running
	waiting.Status, waiting.Claim, waiting.Owner, waiting.LeaseUntil = kvstore.StatusWaiting, 0, "", 0
	if _, err := fe.mem.Update(ctx, &waiting, old.Revision); err != nil {
		t.Fatal(err)
	}
	// c: a new task whose first read finds nothing yet.
	bs.lag("c", nil)
	fe.due("c", "behind")
	seen := map[string]bool{}
	for range 2 {
		seen[next(t, fires).Header.Get(bridge.HeaderTaskID)] = true
	}
	if !seen["b"] || !seen["c"] {
		t.Errorf("fired %v, want b and c", seen)
	}
}

// Claims that fail during a store outage go back to the loop: the bridge does not hold a
// goroutine (and a payload) per failed claim, and Stop returns in time.
// Not parallel: it counts the process's goroutines, which other tests running beside it change.
func TestFailedClaimsHoldNoGoroutines(t *testing.T) {
	fe := newFaultEnv(t)
	fe.store.Inject(faultstore.Rule{Op: faultstore.OpUpdate, Mode: faultstore.FailBefore, Err: context.DeadlineExceeded})
	fe.store.Inject(faultstore.Rule{Op: faultstore.OpGet, Mode: faultstore.FailBefore, Err: context.DeadlineExceeded})
	base := runtime.NumGoroutine()
	const n = 3000
	now := time.Now().UnixMilli()
	for i := range n {
		if _, err := fe.mem.Create(context.Background(), &kvstore.Task{ID: fmt.Sprintf("t%d", i), BizType: "outage",
			Payload: make([]byte, 1024), Status: kvstore.StatusWaiting, DueAt: now, MaxRetry: 3, AckWait: time.Minute,
			CreatedAt: now, UpdatedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	if !bridge.CheckFor(20*time.Second, func() bool { return fe.store.Calls(faultstore.OpUpdate) >= n }) {
		t.Fatalf("only %d of %d claims tried", fe.store.Calls(faultstore.OpUpdate), n)
	}
	// The fault injector's own goroutines end as their calls fail; what remains is the bridge's.
	extra := 0
	if !bridge.CheckFor(5*time.Second, func() bool { extra = runtime.NumGoroutine() - base; return extra < n/10 }) {
		t.Errorf("%d goroutines more than before the outage, for %d failed claims", extra, n)
	}
}

// A task the intake stores is indexed at once by the replica that stored it, not only when the
// watch brings its record (after a restart the watch brings new records behind the whole initial
// load): with its watch event lost and no reconciler pass, it still fires.
func TestIntakeIndexesWhatItCreates(t *testing.T) {
	t.Parallel()
	fe := newFaultEnvCfg(t, func(s *faultstore.Store) bridge.Store { return s }, bridge.Config{ReconcileInterval: time.Hour})
	fires := fe.fires("direct")
	fe.store.Inject(faultstore.Rule{Op: faultstore.OpEvent, ID: "d-1", Mode: faultstore.Drop})
	js, err := jetstream.New(fe.nc)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(bridge.SchedulePrefix + "direct")
	m.Header.Set(bridge.HeaderTaskID, "d-1")
	m.Header.Set(bridge.HeaderDelay, "300ms")
	m.Data = []byte("p")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	if id := next(t, fires).Header.Get(bridge.HeaderTaskID); id != "d-1" {
		t.Fatalf("fired %q, want d-1", id)
	}
	if n := fe.store.Calls(faultstore.OpEvent); n < 1 {
		t.Fatalf("the watch saw %d events: the drop rule never applied", n)
	}
}
