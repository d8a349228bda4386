package bridge

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/internal/faultstore"
	"github.com/axbridge/axbridge/kvstore"
)

// During a store outage, pipelined acks whose writes fail wait on a bounded queue for a fixed set
// of settle goroutines, not on a goroutine each (review N6): the goroutines and the bytes queued
// stay bounded however many acks arrive (past the queue's bound the ack workers wait), and once
// the store is back every ack is applied. Not parallel: it counts the process's goroutines.
func TestFailedAcksQueueBounded(t *testing.T) {
	const n = 600
	const queueLen, queueBytes = 64, 64 << 10
	e := newLoopEnv(t, Config{AckWorkers: 8})
	e.prep = func(b *Bridge) { b.settle = newSettleQueue(queueLen, queueBytes) }
	fires := make(chan *nats.Msg, n)
	sub, err := e.nc.ChanSubscribe(FirePrefix+"loop", fires)
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	for i := range n {
		e.create(fmt.Sprintf("s%03d", i), e.clock.ms())
	}
	b := e.start(nil)
	msgs := make([]*nats.Msg, 0, n)
	for range n {
		select {
		case m := <-fires:
			msgs = append(msgs, m)
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d tasks fired", len(msgs), n)
		}
	}
	base := runtime.NumGoroutine()

	// The store is down: every write and read fails until Clear.
	e.fs.Inject(faultstore.Rule{Op: faultstore.OpUpdate, Mode: faultstore.FailBefore})
	e.fs.Inject(faultstore.Rule{Op: faultstore.OpGet, Mode: faultstore.FailBefore})
	for _, m := range msgs {
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	// Every ack has reached the bridge (its attempt is held, an ack being applied, or it waits
	// for an ack worker), and the settle queue is full: more acks fail than it has room for, and
	// none settles while the store is down. (An ack worker holds its attempt before it takes
	// room, so the first condition alone can hold while the queue is still empty.)
	inHand := func() int {
		b.hand.mu.Lock()
		defer b.hand.mu.Unlock()
		return len(b.hand.m)
	}
	full := func(qn, qb int) bool { return qn == queueLen || qn > 0 && qb+2*qb/qn > queueBytes }
	peak, peakN, peakBytes := 0, 0, 0
	if !checkFor(30*time.Second, func() bool {
		peak = max(peak, runtime.NumGoroutine()-base)
		qn, qb := b.settle.held()
		peakN, peakBytes = max(peakN, qn), max(peakBytes, qb)
		return inHand()+len(b.acks) == n && full(qn, qb)
	}) {
		qn, qb := b.settle.held()
		t.Fatalf("acks taken: %d held, %d waiting, want %d in all; settle queue %d acks, %d bytes, want full", inHand(), len(b.acks), n, qn, qb)
	}
	peak = max(peak, runtime.NumGoroutine()-base)
	if peak > 100 {
		t.Errorf("%d goroutines more than before the outage, for %d acks; want a bounded number", peak, n)
	}
	t.Logf("during the outage: %d goroutines more, settle queue up to %d acks and %d bytes", peak, peakN, peakBytes)
	if peakN > queueLen || peakBytes > queueBytes {
		t.Errorf("settle queue held up to %d acks, %d bytes; want within %d and %d", peakN, peakBytes, queueLen, queueBytes)
	}

	e.fs.Clear()
	if !checkFor(30*time.Second, func() bool {
		for i := range n {
			if en, err := e.mem.Get(context.Background(), fmt.Sprintf("s%03d", i)); err != nil || en.Task.Status != kvstore.StatusSuccess {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("not every ack was applied after the store came back")
	}
	if qn, qb := b.settle.held(); qn != 0 || qb != 0 || inHand() != 0 {
		t.Errorf("after the acks: queue holds %d acks, %d bytes, %d attempts held; want none", qn, qb, inHand())
	}
}
