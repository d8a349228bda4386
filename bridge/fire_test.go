package bridge_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/faultstore"
	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// faultEnv is a bridge on an in-memory store behind a fault injector, on a real nats-server.
type faultEnv struct {
	t     *testing.T
	mem   *kvstore.MemStore
	store *faultstore.Store
	nc    *nats.Conn // the consumer's connection
	reg   *prometheus.Registry
}

func newFaultEnv(t *testing.T) *faultEnv {
	t.Helper()
	return newFaultEnvWith(t, func(s *faultstore.Store) bridge.Store { return s })
}

// newFaultEnvWith is newFaultEnv with the bridge's store wrapped once more.
func newFaultEnvWith(t *testing.T, wrap func(*faultstore.Store) bridge.Store) *faultEnv {
	t.Helper()
	return newFaultEnvCfg(t, wrap, bridge.Config{})
}

// newFaultEnvCfg is newFaultEnvWith with a bridge configuration (its Registerer is the env's).
func newFaultEnvCfg(t *testing.T, wrap func(*faultstore.Store) bridge.Store, cfg bridge.Config) *faultEnv {
	t.Helper()
	srv := natstest.RunServer(t)
	mem := kvstore.NewMemStore(4)
	fe := &faultEnv{t: t, mem: mem, store: faultstore.New(mem), nc: natstest.Connect(t, srv.ClientURL()), reg: prometheus.NewRegistry()}
	cfg.Registerer = fe.reg
	b, err := bridge.New(natstest.Connect(t, srv.ClientURL()), wrap(fe.store), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	select {
	case <-b.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("bridge not ready")
	}
	return fe
}

// fires subscribes to ax.fire.<biz> and queues what arrives.
func (fe *faultEnv) fires(biz string) chan *nats.Msg {
	fe.t.Helper()
	return fe.subscribe(bridge.FirePrefix + biz)
}

// subscribe subscribes to subject and queues what arrives.
func (fe *faultEnv) subscribe(subject string) chan *nats.Msg {
	fe.t.Helper()
	ch := make(chan *nats.Msg, 16)
	sub, err := fe.nc.ChanSubscribe(subject, ch)
	if err != nil {
		fe.t.Fatal(err)
	}
	fe.t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := fe.nc.Flush(); err != nil {
		fe.t.Fatal(err)
	}
	return ch
}

// due stores a WAITING task, due now, with one attempt only and an ack wait of an hour: a fire
// that comes at all during the test did not wait for a lease to run out.
func (fe *faultEnv) due(id, biz string) {
	fe.t.Helper()
	fe.dueWith(id, biz, 0, time.Hour, kvstore.DefaultBackoff())
}

// dueWith stores a WAITING task due now with that policy.
func (fe *faultEnv) dueWith(id, biz string, maxRetry int, ackWait time.Duration, backoff []time.Duration) {
	fe.t.Helper()
	now := time.Now().UnixMilli()
	task := &kvstore.Task{
		ID: id, BizType: biz, Payload: []byte("p"), Status: kvstore.StatusWaiting, DueAt: now,
		MaxRetry: maxRetry, AckWait: ackWait, Backoff: backoff, CreatedAt: now, UpdatedAt: now,
	}
	if _, err := fe.mem.Create(context.Background(), task); err != nil {
		fe.t.Fatal(err)
	}
}

func (fe *faultEnv) get(id string) kvstore.Task {
	fe.t.Helper()
	e, err := fe.mem.Get(context.Background(), id)
	if err != nil {
		fe.t.Fatal(err)
	}
	return e.Task
}

// counter is the value of the series name{label="value"}.
func (fe *faultEnv) counter(name, label, value string) float64 {
	fe.t.Helper()
	mfs, err := fe.reg.Gather()
	if err != nil {
		fe.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func next(t *testing.T, ch chan *nats.Msg) *nats.Msg {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message")
		return nil
	}
}

// A claim whose write lands but whose caller hears only "outcome unknown" is read back and fired
// then: once, at attempt 1, without waiting out the lease; with Max-Retry 0 the task is not DEAD
// and its ack settles it. A claim that failed before it was applied is claimed again.
func TestClaimUnknownOutcome(t *testing.T) {
	t.Parallel()
	for name, mode := range map[string]faultstore.Mode{
		"landed":     faultstore.ApplyThenTimeout,
		"not landed": faultstore.FailBefore,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fe := newFaultEnv(t)
			fires := fe.fires("pay")
			fe.store.Inject(faultstore.Rule{Op: faultstore.OpUpdate, ID: "pay-1", Mode: mode, Times: 1,
				Err: fmt.Errorf("update pay-1: %w", context.DeadlineExceeded)})
			fe.due("pay-1", "pay")

			m := next(t, fires)
			if got := m.Header.Get(bridge.HeaderAttempt); got != "1" {
				t.Fatalf("fired attempt %s, want 1", got)
			}
			if task := fe.get("pay-1"); task.Status != kvstore.StatusRunning || task.Attempt != 1 {
				t.Fatalf("record after the fire: %s attempt %d, want RUNNING attempt 1", task.Status, task.Attempt)
			}
			if err := m.AckSync(); err != nil {
				t.Fatalf("ack: %v", err)
			}
			if task := fe.get("pay-1"); task.Status != kvstore.StatusSuccess {
				t.Fatalf("record after the ack: %s (%s)", task.Status, task.LastError)
			}
			// Exactly once: nothing else is published, in the ack's round trip or the 300 ms after.
			select {
			case m := <-fires:
				t.Fatalf("fired again: attempt %s", m.Header.Get(bridge.HeaderAttempt))
			case <-time.After(300 * time.Millisecond):
			}
			if e, u := fe.counter("ax_store_errors_total", "op", "claim"), fe.counter("ax_store_unknown_outcomes_total", "op", "claim"); e != 1 || u != 1 {
				t.Errorf("claim store errors %v, unknown outcomes %v; want 1 and 1", e, u)
			}
			// The ack reached both ack subscriptions and was applied once: a second application
			// would have counted as stale.
			if a, s := fe.counter("ax_acks_total", "outcome", "ack"), fe.counter("ax_acks_total", "outcome", "stale"); a != 1 || s != 0 {
				t.Errorf("acks applied %v, stale %v; want 1 and 0", a, s)
			}
		})
	}
}

// An ack whose write fails is retried until it is applied; an AckSync is answered only then.
func TestAckRetriedUntilApplied(t *testing.T) {
	t.Parallel()
	fe := newFaultEnv(t)
	fires := fe.fires("pay")
	fe.due("pay-2", "pay")
	m := next(t, fires)
	// The pipelined write fails, then the reads and the writes of the retries, several times each.
	fe.store.Inject(faultstore.Rule{Op: faultstore.OpUpdate, ID: "pay-2", Mode: faultstore.FailBefore, Times: 3})
	fe.store.Inject(faultstore.Rule{Op: faultstore.OpGet, ID: "pay-2", Mode: faultstore.FailBefore, Times: 2})
	if err := m.AckSync(nats.AckWait(10 * time.Second)); err != nil {
		t.Fatalf("ack: %v", err)
	}
	if task := fe.get("pay-2"); task.Status != kvstore.StatusSuccess {
		t.Fatalf("answered before the ack was durable: %s", task.Status)
	}
	if n := fe.store.Calls(faultstore.OpUpdate); n < 5 { // the claim, three failed acks, the one applied
		t.Errorf("%d updates, want the claim and four ack writes", n)
	}
	if w, r := fe.counter("ax_store_errors_total", "op", "ack"), fe.counter("ax_store_errors_total", "op", "ack_read"); w != 3 || r != 2 {
		t.Errorf("ack store errors: %v writes, %v reads; want 3 and 2", w, r)
	}
}

// lateClaim holds back the first write of a task and reports "outcome unknown" for it, then lets
// it land just after the next read of the task, as a publish held in the client over a reconnect
// lands after its caller gave up: the read-back sees the WAITING record, the claim made again then
// loses its CAS to the first one.
type lateClaim struct {
	*faultstore.Store
	id string

	mu   sync.Mutex
	held func() // applies the held write; nil once applied
	used bool
}

func (s *lateClaim) UpdateAsync(ctx context.Context, t *kvstore.Task, rev uint64, done func(uint64, error)) {
	s.mu.Lock()
	first := t.ID == s.id && !s.used
	if first {
		s.used = true
		held := *t
		s.held = func() { _, _ = s.Store.Update(context.Background(), &held, rev) }
	}
	s.mu.Unlock()
	if !first {
		s.Store.UpdateAsync(ctx, t, rev, done)
		return
	}
	go done(0, fmt.Errorf("update %s: %w", t.ID, context.DeadlineExceeded))
}

func (s *lateClaim) Get(ctx context.Context, id string) (kvstore.Entry, error) {
	e, err := s.Store.Get(ctx, id)
	s.mu.Lock()
	held := s.held
	if id == s.id {
		s.held = nil
	}
	s.mu.Unlock()
	if id == s.id && held != nil {
		held()
	}
	return e, err
}

// A claim whose outcome was unknown and that lands late, after the read-back saw the task still
// WAITING, makes the claim made again lose its CAS: that conflict is read back too, and the attempt
// that did land is fired, once, at attempt 1.
func TestClaimLandsLate(t *testing.T) {
	t.Parallel()
	var late *lateClaim
	fe := newFaultEnvWith(t, func(s *faultstore.Store) bridge.Store {
		late = &lateClaim{Store: s, id: "pay-3"}
		return late
	})
	fires := fe.fires("pay")
	fe.due("pay-3", "pay")
	m := next(t, fires)
	if got := m.Header.Get(bridge.HeaderAttempt); got != "1" {
		t.Fatalf("fired attempt %s, want 1", got)
	}
	if err := m.AckSync(); err != nil {
		t.Fatalf("ack: %v", err)
	}
	if task := fe.get("pay-3"); task.Status != kvstore.StatusSuccess {
		t.Fatalf("record after the ack: %s", task.Status)
	}
	late.mu.Lock()
	defer late.mu.Unlock()
	if !late.used || late.held != nil {
		t.Fatalf("the held claim was not applied (used %v)", late.used)
	}
}

// A term whose write lands but reports an unknown outcome is recognised when read back: it is
// the reply applied (answered, counted, and the DEAD event published), not a stale one.
func TestAckUnknownOutcomeRecognised(t *testing.T) {
	t.Parallel()
	fe := newFaultEnv(t)
	fires := fe.fires("pay")
	dead := make(chan *nats.Msg, 4)
	sub, err := fe.nc.ChanSubscribe(bridge.DeadPrefix+"pay", dead)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	fe.due("pay-4", "pay")
	m := next(t, fires)
	fe.store.Inject(faultstore.Rule{Op: faultstore.OpUpdate, ID: "pay-4", Mode: faultstore.ApplyThenTimeout, Times: 1})
	if _, err := fe.nc.Request(m.Reply, []byte("+TERM bad card"), 10*time.Second); err != nil { // TermWithReason, sync
		t.Fatalf("term: %v", err)
	}
	if task := fe.get("pay-4"); task.Status != kvstore.StatusDead || task.LastError != "bad card" {
		t.Fatalf("record after the term: %s %q", task.Status, task.LastError)
	}
	if d := next(t, dead); d.Subject != bridge.DeadPrefix+"pay" || d.Header.Get(bridge.HeaderError) != "bad card" {
		t.Fatalf("dead event %s %v", d.Subject, d.Header)
	}
	if a, s := fe.counter("ax_acks_total", "outcome", "term"), fe.counter("ax_acks_total", "outcome", "stale"); a != 1 || s != 0 {
		t.Errorf("terms applied %v, stale %v; want 1 and 0", a, s)
	}
	if u := fe.counter("ax_store_unknown_outcomes_total", "op", "ack"); u != 1 {
		t.Errorf("ack unknown outcomes %v, want 1", u)
	}
}
