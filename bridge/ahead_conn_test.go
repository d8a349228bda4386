package bridge

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// A held claim whose due time comes while the bridge's connection to NATS is down is not put in
// the reconnect buffer: if the attempt's lease ends before the reconnect, the attempt is never
// delivered (it could otherwise reach the consumer after the next attempt). No consumer received
// it, so it is given back uncounted, and after the reconnect the task fires once, as attempt 1,
// under a new claim.
func TestClaimAheadNotBufferedWhileDisconnected(t *testing.T) {
	t.Parallel()
	e := newLoopEnv(t, Config{ClaimAhead: time.Second})
	proxy := natstest.NewCutProxy(t, strings.TrimPrefix(e.nc.ConnectedUrl(), "nats://"))
	bnc := natstest.Connect(t, proxy.URL(), nats.ReconnectBufSize(1<<20))
	fires := e.consume(2)
	var held atomicInt
	b, err := New(bnc, e.fs, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.m.loop.observe = func(s loopStats) { held.set(s.held) }
	for range claimSamples {
		b.fired.times.add(time.Second) // the window stays at its bound
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
	<-b.Ready()
	now := e.clock.ms()
	due := now + 1500
	if _, err := e.mem.Create(context.Background(), &kvstore.Task{
		ID: "offline", BizType: "loop", Payload: []byte("p"), Status: kvstore.StatusWaiting, DueAt: due,
		MaxRetry: 3, AckWait: time.Second, Backoff: []time.Duration{time.Hour}, CreatedAt: now, UpdatedAt: now,
	}); err != nil {
		t.Fatal(err)
	}
	if !checkFor(10*time.Second, func() bool { return held.get() == 1 }) {
		t.Fatal("the claim is not held")
	}
	proxy.SetCut(true)
	if !checkFor(5*time.Second, func() bool { return !bnc.IsConnected() }) {
		t.Fatal("the bridge's connection did not go down")
	}
	// Past the due time and the attempt's lease (due + 1s) while disconnected.
	noFire(t, fires, time.Until(time.UnixMilli(due+1000))+300*time.Millisecond, "while disconnected")
	proxy.SetCut(false)
	if !checkFor(10*time.Second, func() bool { return bnc.IsConnected() }) {
		t.Fatal("the bridge did not reconnect")
	}
	f := next(t, fires, 10*time.Second)
	if f.id != "offline" || f.attempt != 1 {
		t.Fatalf("after the reconnect fired %+v; want offline at attempt 1 (the attempt not delivered given back)", f)
	}
	if v := value(t, b.m.givenBack.WithLabelValues("loop")); v != 1 {
		t.Errorf("ax_attempts_given_back_total %v, want 1", v)
	}
	if err := bnc.Flush(); err != nil {
		t.Fatal(err)
	}
	noFire(t, fires, 300*time.Millisecond, "after the fire that followed the reconnect")
}

// atomicInt is an int the loop's observer sets and the test reads.
type atomicInt struct {
	mu sync.Mutex
	n  int
}

func (a *atomicInt) set(n int) { a.mu.Lock(); a.n = n; a.mu.Unlock() }
func (a *atomicInt) get() int  { a.mu.Lock(); defer a.mu.Unlock(); return a.n }
