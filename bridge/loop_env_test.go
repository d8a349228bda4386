package bridge

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/internal/faultstore"
	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// stepClock is a wall clock a test can step while the runtime's monotonic clock runs on.
type stepClock struct{ off atomic.Int64 }

func (c *stepClock) Now() time.Time           { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *stepClock) step(d time.Duration)     { c.off.Add(int64(d)) }
func (c *stepClock) ms() int64                { return c.Now().UnixMilli() }
func (c *stepClock) in(d time.Duration) int64 { return c.Now().Add(d).UnixMilli() }

// loopEnv is a bridge on an in-process nats-server, whose task store is a MemStore behind a
// faultstore, with a wall clock the test can step.
type loopEnv struct {
	t     *testing.T
	nc    *nats.Conn
	mem   *kvstore.MemStore
	fs    *faultstore.Store
	clock *stepClock
	cfg   Config
	b     *Bridge
	prep  func(*Bridge) // if set, runs between New and Start
}

func newLoopEnv(t *testing.T, cfg Config) *loopEnv {
	t.Helper()
	srv := natstest.RunServer(t)
	e := &loopEnv{t: t, nc: natstest.Connect(t, srv.ClientURL()), mem: kvstore.NewMemStore(4), clock: &stepClock{}}
	e.fs = faultstore.New(e.mem)
	if cfg.Now == nil {
		cfg.Now = e.clock.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	e.cfg = cfg
	return e
}

// start starts the bridge (observe, if set, sees the loop's state after every turn) and stops it
// when the test ends.
func (e *loopEnv) start(observe func(loopStats)) *Bridge {
	e.t.Helper()
	b, err := New(e.nc, e.fs, e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	b.m.loop.observe = observe
	if e.prep != nil {
		e.prep(b)
	}
	if err := b.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Stop(ctx); err != nil {
			e.t.Errorf("stop bridge: %v", err)
		}
	})
	select {
	case <-b.Ready():
	case <-time.After(10 * time.Second):
		e.t.Fatal("bridge not ready")
	}
	e.b = b
	return b
}

// create stores a WAITING task of bizType "loop" due at dueMs (by the test clock's epoch).
func (e *loopEnv) create(id string, dueMs int64) kvstore.Entry {
	e.t.Helper()
	now := e.clock.ms()
	en, err := e.mem.Create(context.Background(), &kvstore.Task{
		ID: id, BizType: "loop", Payload: []byte("p-" + id), Status: kvstore.StatusWaiting, DueAt: dueMs,
		MaxRetry: 3, AckWait: 30 * time.Second, Backoff: []time.Duration{time.Hour}, CreatedAt: now, UpdatedAt: now,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return en
}

// createRunning stores a RUNNING task of bizType "loop" at attempt 1, leased by owner until untilMs.
func (e *loopEnv) createRunning(id, owner string, untilMs int64) kvstore.Entry {
	e.t.Helper()
	now := e.clock.ms()
	en, err := e.mem.Create(context.Background(), &kvstore.Task{
		ID: id, BizType: "loop", Payload: []byte("p-" + id), Status: kvstore.StatusRunning, DueAt: now, Attempt: 1,
		MaxRetry: 3, AckWait: time.Second, Backoff: []time.Duration{time.Hour}, LeaseUntil: untilMs, Owner: owner,
		Claim: 1, CreatedAt: now, UpdatedAt: now,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return en
}

// fire is one fire message as a consumer saw it, with the bridge clock's reading on arrival.
type fire struct {
	id      string
	attempt int
	dueAt   time.Time
	seenMs  int64
}

// consume acks every fire of bizType "loop" and reports it on the returned channel (buffered n).
func (e *loopEnv) consume(n int) <-chan fire { return e.consumeAck(n, true) }

// consumeAck is consume, acking or not (an attempt then stays RUNNING for its ack wait).
func (e *loopEnv) consumeAck(n int, ack bool) <-chan fire {
	e.t.Helper()
	ch := make(chan fire, n)
	sub, err := e.nc.Subscribe(FirePrefix+"loop", func(m *nats.Msg) {
		f := fire{id: m.Header.Get(HeaderTaskID), seenMs: e.clock.ms()}
		f.attempt, _ = strconv.Atoi(m.Header.Get(HeaderAttempt))
		f.dueAt, _ = time.Parse(DueAtLayout, m.Header.Get(HeaderDueAt))
		if ack {
			_ = m.Ack()
		}
		select {
		case ch <- f:
		default:
			e.t.Errorf("more fires than the %d expected", n)
		}
	})
	if err != nil {
		e.t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return ch
}

// next waits (bounded) for the next fire.
func next(t *testing.T, ch <-chan fire, within time.Duration) fire {
	t.Helper()
	select {
	case f := <-ch:
		return f
	case <-time.After(within):
		t.Fatalf("no fire within %v", within)
	}
	return fire{}
}

// neverEarly fails the test if f arrived before its due time by the bridge's clock.
func neverEarly(t *testing.T, f fire) {
	t.Helper()
	if f.seenMs < f.dueAt.UnixMilli() {
		t.Errorf("task %s fired %d ms before its due time by the bridge clock", f.id, f.dueAt.UnixMilli()-f.seenMs)
	}
}

// checkFor polls cond until it holds or within has passed (a bounded poll, not a wait by sleep).
func checkFor(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// tWriter sends log lines to t.Log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
