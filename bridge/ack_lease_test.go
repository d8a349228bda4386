package bridge_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/faultstore"
	"github.com/axbridge/axbridge/kvstore"
)

// slowAcks fails every write that would settle a task SUCCESS while blocked is set, as a store in
// an election fails the writes of acks; every other write (the lease's expiry among them) goes
// through.
type slowAcks struct {
	*faultstore.Store
	blocked atomic.Bool
	refused atomic.Int64
}

var errElection = errors.New("no leader")

func (s *slowAcks) Update(ctx context.Context, t *kvstore.Task, rev uint64) (uint64, error) {
	if s.blocked.Load() && t.Status == kvstore.StatusSuccess {
		s.refused.Add(1)
		return 0, errElection
	}
	return s.Store.Update(ctx, t, rev)
}

func (s *slowAcks) UpdateAsync(ctx context.Context, t *kvstore.Task, rev uint64, done func(uint64, error)) {
	if s.blocked.Load() && t.Status == kvstore.StatusSuccess {
		s.refused.Add(1)
		done(0, errElection)
		return
	}
	s.Store.UpdateAsync(ctx, t, rev, done)
}

// An ack that arrives within its attempt's lease decides the attempt even if the store cannot
// write it until after the lease has ended: the lease's expiry waits for it, the task ends
// SUCCESS at attempt 1, and it is not fired again (in TestNATSLeaderLoss, acks held up by the
// election came back as repeats).
func TestAckInHandOutlastsTheLease(t *testing.T) {
	t.Parallel()
	var sa *slowAcks
	fe := newFaultEnvWith(t, func(s *faultstore.Store) bridge.Store { sa = &slowAcks{Store: s}; return sa })
	fires := fe.fires("hand")
	fe.dueWith("h", "hand", 3, time.Second, []time.Duration{0})
	sa.blocked.Store(true)
	m := next(t, fires)
	if err := m.Respond([]byte("+ACK")); err != nil { // within the 1 s lease
		t.Fatal(err)
	}
	// Past the lease's end (1 s from the fire) and the loop's recheck of it (1 s): no retry.
	select {
	case m2 := <-fires:
		t.Fatalf("fired again (attempt %s) while the ack of attempt %s waited for the store", m2.Header.Get(bridge.HeaderAttempt), m.Header.Get(bridge.HeaderAttempt))
	case <-time.After(3 * time.Second):
	}
	if sa.refused.Load() == 0 {
		t.Fatal("no ack write was refused: the test did not hold the ack up")
	}
	if task := fe.get("h"); task.Status != kvstore.StatusRunning || task.Attempt != 1 {
		t.Fatalf("while the ack waits: %s attempt %d, want RUNNING at attempt 1", task.Status, task.Attempt)
	}
	sa.blocked.Store(false)
	if !bridge.CheckFor(10*time.Second, func() bool { return fe.get("h").Status == kvstore.StatusSuccess }) {
		t.Fatalf("the ack was not applied once the store took it: %+v", fe.get("h"))
	}
	if task := fe.get("h"); task.Attempt != 1 {
		t.Errorf("SUCCESS at attempt %d, want 1", task.Attempt)
	}
	select {
	case m2 := <-fires:
		t.Errorf("fired again: attempt %s", m2.Header.Get(bridge.HeaderAttempt))
	case <-time.After(300 * time.Millisecond):
	}
}

// slowClaim lands the first claim of task id at once but reports it only after delay.
type slowClaim struct {
	*faultstore.Store
	id    string
	delay time.Duration
	done  atomic.Bool
}

func (s *slowClaim) UpdateAsync(ctx context.Context, t *kvstore.Task, rev uint64, done func(uint64, error)) {
	if t.ID != s.id || t.Status != kvstore.StatusRunning || t.Claim != rev || s.done.Swap(true) {
		s.Store.UpdateAsync(ctx, t, rev, done)
		return
	}
	s.Store.UpdateAsync(ctx, t, rev, func(r uint64, err error) {
		time.AfterFunc(s.delay, func() { done(r, err) })
	})
}

// A claim whose answer comes only after the attempt's lease has ended (a starved replica) is not
// fired, and its attempt is given back uncounted: the task, with no retry left, is fired again as
// attempt 1 and ends SUCCESS instead of DEAD with no delivery (issue 24, "no attempt spent
// without a delivery").
func TestAttemptNotFiredIsGivenBack(t *testing.T) {
	t.Parallel()
	sc := &slowClaim{id: "g", delay: 1500 * time.Millisecond}
	fe := newFaultEnvWith(t, func(s *faultstore.Store) bridge.Store { sc.Store = s; return sc })
	fires := fe.fires("give")
	fe.dueWith("g", "give", 0, time.Second, []time.Duration{0})
	var m *nats.Msg
	select {
	case m = <-fires:
	case <-time.After(10 * time.Second):
		t.Fatalf("no fire; the task is %+v, given back %v", fe.get("g"), fe.counter("ax_attempts_given_back_total", "biz_type", "give"))
	}
	if got := m.Header.Get(bridge.HeaderAttempt); got != "1" {
		t.Errorf("first delivery is attempt %s, want 1 (the attempt not fired was given back)", got)
	}
	if err := m.Respond([]byte("+ACK")); err != nil {
		t.Fatal(err)
	}
	if !bridge.CheckFor(10*time.Second, func() bool { return fe.get("g").Status == kvstore.StatusSuccess }) {
		t.Fatalf("task %+v, want SUCCESS", fe.get("g"))
	}
	if v := fe.counter("ax_attempts_given_back_total", "biz_type", "give"); v != 1 {
		t.Errorf("ax_attempts_given_back_total %v, want 1", v)
	}
}
