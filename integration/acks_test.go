package integration

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/faultstore"
	"github.com/axbridge/axbridge/kvstore"
)

// startFaultBridge is startBridge with the bridge's bucket handle behind a fault injector.
func (e *env) startFaultBridge(cfg bridge.Config) *faultstore.Store {
	e.t.Helper()
	var fs *faultstore.Store
	e.startBridgeWrapped(e.srv.ClientURL(), kvstore.Config{}, cfg, func(s *kvstore.JetStore) bridge.Store {
		fs = faultstore.New(s)
		return fs
	})
	return fs
}

// A late +ACK from a task's first life, after it went DEAD and was requeued, does not settle the
// new life: the two lives' first attempts reply on different subjects (the claim token), and the
// late ack is ignored, though still answered.
func TestLateAckOfFirstLife(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{})
	c := e.consume("ax.fire.pay", nil) // holds every fire unanswered
	e.schedule("pay", "p", bridge.HeaderTaskID, "pay-7", bridge.HeaderMaxRetry, "0", bridge.HeaderAckWait, "1s")
	first := c.next(t, 5*time.Second)
	e.waitStatus("pay-7", kvstore.StatusDead, 5*time.Second) // no ack within 1s, no retry left

	if got, code := e.apiCall(bridge.APIRequeue, "pay-7"); code != "" || got.Status != "WAITING" {
		t.Fatalf("requeue: %+v %s", got, code)
	}
	second := c.next(t, 5*time.Second)
	if a1, a2 := first.msg.Header.Get(bridge.HeaderAttempt), second.msg.Header.Get(bridge.HeaderAttempt); a1 != "1" || a2 != "1" {
		t.Fatalf("attempts %s and %s, want 1 in each life", a1, a2)
	}
	if first.msg.Reply == second.msg.Reply {
		t.Fatalf("both lives reply on %s", first.msg.Reply)
	}
	if err := first.msg.AckSync(); err != nil { // the first life's consumer, late
		t.Fatalf("late ack not answered: %v", err)
	}
	if rec := e.waitStatus("pay-7", kvstore.StatusRunning, time.Second); rec.Task.Attempt != 1 {
		t.Fatalf("after the late ack: %+v", rec.Task)
	}
	if err := second.msg.AckSync(); err != nil {
		t.Fatal(err)
	}
	e.waitStatus("pay-7", kvstore.StatusSuccess, 5*time.Second)
}

// NakWithDelay of the largest duration parks the task for the longest retry delay, 30 days: it
// is WAITING with that due time, and the bridge does not spin on it (a handful of reads while
// another task is scheduled, fired and acked, not one per loop turn).
func TestNakLargestDelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fs := e.startFaultBridge(bridge.Config{})
	c := e.consume("ax.fire.park", nil)
	e.schedule("park", "p", bridge.HeaderTaskID, "park-1")
	f := c.next(t, 5*time.Second)
	before := time.Now()
	if err := f.msg.NakWithDelay(time.Duration(math.MaxInt64), nats.AckWait(5*time.Second)); err != nil {
		t.Fatalf("nak: %v", err)
	}
	after := time.Now()
	rec := e.waitStatus("park-1", kvstore.StatusWaiting, time.Second)
	lo, hi := before.Add(kvstore.MaxRetryDelay).UnixMilli(), after.Add(kvstore.MaxRetryDelay).UnixMilli()+1
	if rec.Task.DueAt < lo || rec.Task.DueAt > hi {
		t.Fatalf("due %v, want %v after the nak", time.UnixMilli(rec.Task.DueAt), kvstore.MaxRetryDelay)
	}

	gets := fs.Calls(faultstore.OpGet)
	e.schedule("park", "q", bridge.HeaderTaskID, "park-2", bridge.HeaderDelay, "300ms")
	g := c.next(t, 5*time.Second)
	if g.msg.Header.Get(bridge.HeaderTaskID) != "park-2" {
		t.Fatalf("fired %v, want park-2", g.msg.Header)
	}
	if err := g.msg.AckSync(); err != nil {
		t.Fatal(err)
	}
	if n := fs.Calls(faultstore.OpGet) - gets; n > 10 {
		t.Errorf("%d store reads while one other task ran: the parked task spins", n)
	}
	if now := e.waitStatus("park-1", kvstore.StatusWaiting, time.Second); now.Revision != rec.Revision {
		t.Errorf("parked task changed: %+v", now.Task)
	}
}

// AckSync gets no reply while the ack's write fails, and its reply once the write is durable.
func TestAckSyncOnlyWhenDurable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fs := e.startFaultBridge(bridge.Config{})
	c := e.consume("ax.fire.sync", nil)

	e.schedule("sync", "ok", bridge.HeaderTaskID, "sync-ok")
	f := c.next(t, 5*time.Second)
	if err := f.msg.AckSync(); err != nil {
		t.Fatalf("ack with a healthy store: %v", err)
	}
	if rec, err := e.store.Get(context.Background(), "sync-ok"); err != nil || rec.Task.Status != kvstore.StatusSuccess {
		t.Fatalf("answered, but the record is %s (err %v)", rec.Task.Status, err)
	}

	e.schedule("sync", "bad", bridge.HeaderTaskID, "sync-bad")
	f = c.next(t, 5*time.Second)
	fs.Inject(faultstore.Rule{Op: faultstore.OpUpdate, ID: "sync-bad", Mode: faultstore.FailBefore})
	err := f.msg.AckSync(nats.AckWait(500 * time.Millisecond))
	if !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("ack while its write fails: err = %v, want a timeout", err)
	}
	if rec := e.waitStatus("sync-bad", kvstore.StatusRunning, time.Second); rec.Task.Attempt != 1 {
		t.Fatalf("record: %+v", rec.Task)
	}
	// The store recovers: the ack, still being retried, is applied.
	fs.Clear()
	e.waitStatus("sync-bad", kvstore.StatusSuccess, 5*time.Second)
}

// A reply on the ack subject of another bizType settles nothing (review N5): a consumer that may
// publish on ax.ack.order.> and knows, or guesses, a coupon task's partition, token and id sends
// +TERM and +ACK on ax.ack.order.<p>.<token>.<id>. Each is ignored (and answered); the task stays
// RUNNING at attempt 1 until its own consumer's ack makes it SUCCESS.
func TestAckOnAnotherBizTypeIgnored(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{})
	c := e.consume("ax.fire.coupon", nil) // holds the fire unanswered
	e.schedule("coupon", "c", bridge.HeaderTaskID, "coupon-1", bridge.HeaderAckWait, "30s")
	f := c.next(t, 5*time.Second)
	forged, ok := strings.CutPrefix(f.msg.Reply, "ax.ack.coupon.")
	if !ok {
		t.Fatalf("reply subject %q", f.msg.Reply)
	}
	forged = "ax.ack.order." + forged
	for _, body := range []string{"+TERM forged", "+ACK", "-NAK"} {
		if _, err := e.nc.Request(forged, []byte(body), 5*time.Second); err != nil {
			t.Fatalf("%s on %s: not answered: %v", body, forged, err)
		}
		if rec := e.waitStatus("coupon-1", kvstore.StatusRunning, time.Second); rec.Task.Attempt != 1 || rec.Task.LastError != "" {
			t.Fatalf("after %s on %s: %s attempt %d %q; want RUNNING at attempt 1", body, forged, rec.Task.Status, rec.Task.Attempt, rec.Task.LastError)
		}
	}
	if err := f.msg.AckSync(); err != nil {
		t.Fatal(err)
	}
	e.waitStatus("coupon-1", kvstore.StatusSuccess, 5*time.Second)
}

// The answer to a sync ack says what became of it (review N8): Ax-Ack: applied once the new
// state is durable, Ax-Ack: stale for a reply that was ignored (an attempt retried after its
// lease, a finished task, another bizType's subject), so that a caller can tell the two apart.
func TestAckReplySaysAppliedOrStale(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{})
	c := e.consume("ax.fire.sync", nil) // holds every fire unanswered
	e.schedule("sync", "s", bridge.HeaderTaskID, "sync-1", bridge.HeaderAckWait, "1s", bridge.HeaderBackoff, "0s")
	first := c.next(t, 5*time.Second)
	second := c.next(t, 10*time.Second) // attempt 1's lease ran out: attempt 2
	ack := func(subject, body string) string {
		t.Helper()
		m, err := e.nc.Request(subject, []byte(body), 5*time.Second)
		if err != nil {
			t.Fatalf("%s on %s: %v", body, subject, err)
		}
		return m.Header.Get(bridge.HeaderAck)
	}
	if got := ack(first.msg.Reply, "+ACK"); got != bridge.AckStale {
		t.Errorf("ack of attempt 1 after its lease: Ax-Ack %q, want %q", got, bridge.AckStale)
	}
	if got := ack(strings.Replace(second.msg.Reply, "ax.ack.sync.", "ax.ack.other.", 1), "+ACK"); got != bridge.AckStale {
		t.Errorf("ack on another bizType's subject: Ax-Ack %q, want %q", got, bridge.AckStale)
	}
	if got := ack(second.msg.Reply, "+WPI"); got != bridge.AckApplied {
		t.Errorf("+WPI of attempt 2: Ax-Ack %q, want %q", got, bridge.AckApplied)
	}
	if got := ack(second.msg.Reply, "+ACK"); got != bridge.AckApplied {
		t.Errorf("ack of attempt 2: Ax-Ack %q, want %q", got, bridge.AckApplied)
	}
	e.waitStatus("sync-1", kvstore.StatusSuccess, time.Second)
	if got := ack(second.msg.Reply, "+ACK"); got != bridge.AckStale {
		t.Errorf("second ack of a finished task: Ax-Ack %q, want %q", got, bridge.AckStale)
	}
}
