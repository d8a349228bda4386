package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/faultstore"
	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// Wire-level proofs of issue 14's guarantees: ids reused across retirements, a re-watch across a
// NATS restart, the reconciler on the wire, a restarted replica settling its own claims.

// A task id used three times, each after the previous life was retired by the server (the final
// record's Nats-TTL ran out), fires three times, each as a new task from attempt 1; no later life
// is reported as a duplicate or rejected as a conflict.
func TestIDReusedAcrossRetirements(t *testing.T) {
	t.Parallel()
	storeCfg := kvstore.Config{Retention: time.Second, MarkerTTL: time.Second}
	srv := natstest.RunServer(t)
	e := newEnvOn(t, srv.ClientURL(), storeCfg)
	e.srv = srv
	e.startBridgeOn(srv.ClientURL(), storeCfg, bridge.Config{})
	// One subscription, so fires and events arrive in the order the bridge sent them:
	// ax.fire.three, ax.duplicate.three, ax.rejected.three (and the schedules themselves).
	c := e.consume("ax.*.three", nil)
	nextFire := func() fired {
		t.Helper()
		for {
			f := c.next(t, 10*time.Second)
			switch {
			case strings.HasPrefix(f.msg.Subject, bridge.SchedulePrefix):
				continue
			case f.msg.Subject != "ax.fire.three":
				t.Fatalf("event on %s: %v %s", f.msg.Subject, f.msg.Header, f.msg.Data)
			}
			return f
		}
	}

	for life, payload := range []string{"first", "first", "third"} { // the second repeats the first's content
		e.schedule("three", payload, bridge.HeaderTaskID, "x")
		f := nextFire()
		if a := f.msg.Header.Get(bridge.HeaderAttempt); a != "1" || string(f.msg.Data) != payload {
			t.Fatalf("life %d: fired attempt %s with %q, want attempt 1 with %q", life+1, a, f.msg.Data, payload)
		}
		if err := f.msg.AckSync(); err != nil {
			t.Fatalf("life %d: ack: %v", life+1, err)
		}
		e.waitStatus("x", kvstore.StatusSuccess, 5*time.Second)
		if !checkFor(15*time.Second, func() bool {
			_, err := e.store.Get(context.Background(), "x")
			return errors.Is(err, kvstore.ErrNotFound)
		}) {
			t.Fatalf("life %d: record not retired by its TTL", life+1)
		}
	}
}

// The server goes down, the task watch ends while it is down, so the bridge's re-watch attempts
// fail until the server is back on its store directory. Tasks pending across the outage and tasks
// created after it (half of them stored by another party, so seen only through the new watch: the
// reconciler is too slow to mask a lost one) all fire, none before its Ax-Due-At, and none is
// left WAITING.
func TestNATSRestartDuringRewatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	fs := e.startFaultBridge(bridge.Config{Registerer: reg, WatchTimeout: time.Second, ReconcileInterval: time.Hour})
	c := e.consume("ax.fire.rewatch", func(m *nats.Msg) { _ = m.Ack() })
	retry := []string{bridge.HeaderAckWait, "2s", bridge.HeaderBackoff, "100ms"}
	ids := e.scheduleSpread("rewatch", 20, 3*time.Second, retry...)
	// Every one is a record before the outage (a schedule message whose record was not yet
	// written is the intake's to redeliver, which is not what this test is about).
	for _, id := range ids {
		if !checkFor(5*time.Second, func() bool {
			_, err := e.store.Get(context.Background(), id)
			return err == nil
		}) {
			t.Fatalf("task %s not stored", id)
		}
	}

	watches := fs.Calls(faultstore.OpWatch)
	e.srv.Shutdown()
	fs.EndWatches()
	// Two attempts: the second starts only after the first failed with the server down.
	if !checkFor(10*time.Second, func() bool { return fs.Calls(faultstore.OpWatch) >= watches+2 }) {
		t.Fatalf("%d watch attempts while the server is down, want 2 or more", fs.Calls(faultstore.OpWatch)-watches)
	}
	e.srv.Restart(t)
	if !checkFor(10*time.Second, func() bool { return e.nc.Status() == nats.CONNECTED }) {
		t.Fatal("client not reconnected")
	}
	// Half through this bridge's intake (which indexes what it stores), half stored by someone
	// else (another replica's intake): those reach this bridge only through its new watch.
	for i := range 10 {
		id := fmt.Sprintf("rewatch-after-%d", i)
		ids = append(ids, id)
		delay := time.Duration(i) * 100 * time.Millisecond
		if i%2 == 0 {
			e.schedule("rewatch", "y", append([]string{bridge.HeaderTaskID, id, bridge.HeaderDelay, delay.String()}, retry...)...)
			continue
		}
		now := time.Now()
		if _, err := e.store.Create(context.Background(), &kvstore.Task{ID: id, BizType: "rewatch", Payload: []byte("y"),
			Status: kvstore.StatusWaiting, DueAt: now.Add(delay).UnixMilli(), MaxRetry: 3, AckWait: 2 * time.Second,
			Backoff: []time.Duration{100 * time.Millisecond}, CreatedAt: now.UnixMilli(), UpdatedAt: now.UnixMilli()}); err != nil {
			t.Fatalf("store %s: %v", id, err)
		}
	}

	seen := map[string]bool{}
	check := func(f fired) {
		t.Helper()
		id := f.msg.Header.Get(bridge.HeaderTaskID)
		if due := dueAt(t, f.msg); f.at.Before(due) {
			t.Errorf("task %s fired at %v, before its due time %v", id, f.at, due)
		}
		seen[id] = true
	}
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for len(seen) < len(ids) {
		select {
		case f := <-c.ch:
			check(f)
			continue
		case <-deadline.C:
		}
		var missing []string
		for _, id := range ids {
			if !seen[id] {
				rec, err := e.store.Get(context.Background(), id)
				missing = append(missing, fmt.Sprintf("%s (%+v, err %v)", id, rec.Task, err))
			}
		}
		t.Fatalf("%d of %d tasks never fired: %v", len(missing), len(ids), missing)
	}
	e.waitAll(ids, kvstore.StatusSuccess, 10*time.Second)
	for len(c.ch) > 0 {
		check(<-c.ch)
	}
	if n := metricSum(reg, "ax_watch_restarts_total", nil); n < 1 {
		t.Errorf("ax_watch_restarts_total %v, want at least 1", n)
	}
}

// A task whose watch event is dropped is never indexed by the loop; the reconciler finds it
// WAITING past due and fires it, and counts one repair. A task without a fault fires normally.
func TestReconcilerFiresDroppedEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	fs := e.startFaultBridge(bridge.Config{Registerer: reg, ReconcileInterval: time.Second, ReconcileGrace: 200 * time.Millisecond})
	c := e.consume("ax.fire.lost", func(m *nats.Msg) { _ = m.Ack() })
	fs.Inject(faultstore.Rule{Op: faultstore.OpEvent, ID: "lost-1", Mode: faultstore.Drop, Times: 1})
	// lost-1 is stored by someone else (another replica's intake), so this bridge learns of it
	// only through its watch, which loses the event; lost-ok goes through this bridge's intake.
	now := time.Now()
	if _, err := e.store.Create(context.Background(), &kvstore.Task{ID: "lost-1", BizType: "lost", Payload: []byte("x"),
		Status: kvstore.StatusWaiting, DueAt: now.Add(200 * time.Millisecond).UnixMilli(), MaxRetry: 3, AckWait: 30 * time.Second,
		Backoff: kvstore.DefaultBackoff(), CreatedAt: now.UnixMilli(), UpdatedAt: now.UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	e.schedule("lost", "y", bridge.HeaderTaskID, "lost-ok", bridge.HeaderDelay, "200ms")

	seen := map[string]bool{}
	for len(seen) < 2 {
		f := c.next(t, 10*time.Second)
		id := f.msg.Header.Get(bridge.HeaderTaskID)
		if due := dueAt(t, f.msg); f.at.Before(due) {
			t.Errorf("task %s fired at %v, before its due time %v", id, f.at, due)
		}
		seen[id] = true
	}
	if !seen["lost-1"] || !seen["lost-ok"] {
		t.Fatalf("fired %v, want lost-1 and lost-ok", seen)
	}
	e.waitAll([]string{"lost-1", "lost-ok"}, kvstore.StatusSuccess, 5*time.Second)
	if n := fs.Calls(faultstore.OpEvent); n == 0 {
		t.Fatal("no watch event went through the fault store")
	}
	if n := metricSum(reg, "ax_reconcile_repairs_total", map[string]string{"kind": "waiting"}); n != 1 {
		t.Errorf("ax_reconcile_repairs_total %v, want 1", n)
	}
}

// A replica restarted with the same ReplicaID settles a claim its previous run made: the consumer
// holds the fire across the restart, then replies +ACK on the fire's reply subject; the new run
// applies it (SUCCESS, attempt 1), answers it, and does not fire the task again.
func TestRestartedReplicaSettlesItsClaims(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.startBridge(bridge.Config{ReplicaID: "r1"})
	c := e.consume("ax.fire.held", nil) // answers nothing by itself
	e.schedule("held", "x", bridge.HeaderTaskID, "held-1", bridge.HeaderAckWait, "1m")
	f := c.next(t, 5*time.Second)
	if rec := e.waitStatus("held-1", kvstore.StatusRunning, time.Second); rec.Task.Attempt != 1 {
		t.Fatalf("claimed: %+v", rec.Task)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.Stop(ctx); err != nil {
		t.Fatalf("stop the first run: %v", err)
	}

	e.startBridge(bridge.Config{ReplicaID: "r1"})
	// The consumer's +ACK, as a request (AckSync): the new run answers it once the ack is durable.
	// Until the new run's ack subscription is live on the server the request finds no responders
	// and is sent again.
	if !checkFor(10*time.Second, func() bool {
		_, err := e.nc.Request(f.msg.Reply, []byte("+ACK"), time.Second)
		return err == nil
	}) {
		t.Fatal("the +ACK of the held fire was never answered")
	}
	if rec, err := e.store.Get(context.Background(), "held-1"); err != nil || rec.Task.Status != kvstore.StatusSuccess || rec.Task.Attempt != 1 {
		t.Fatalf("answered, but the record is %+v (err %v), want SUCCESS at attempt 1", rec.Task, err)
	}
	// A later task's fire comes from the same connection as any second fire of held-1 would
	// have, and after it: held-1 was not fired again if this is the next message.
	e.schedule("held", "y", bridge.HeaderTaskID, "held-2")
	if g := c.next(t, 5*time.Second); g.msg.Header.Get(bridge.HeaderTaskID) != "held-2" {
		t.Fatalf("fired %v after the restart, want held-2 only", g.msg.Header)
	}
}
