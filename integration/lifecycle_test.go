package integration

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// Tasks fire at their due time, never before, once each, with the documented headers.
func TestFireOnTimeNeverEarly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{})
	c := e.consume("ax.fire.orders", func(m *nats.Msg) { _ = m.Ack() })

	// A due time in the past, within the tolerance, fires at once.
	e.schedule("orders", `{"id":"late"}`, bridge.HeaderTaskID, "order-late",
		bridge.HeaderDeliverAt, time.Now().Add(-30*time.Second).UTC().Format(time.RFC3339))
	if f := c.next(t, 5*time.Second); f.msg.Header.Get(bridge.HeaderTaskID) != "order-late" {
		t.Fatalf("first fire %v, want the overdue task", f.msg.Header)
	}

	// Delays of 100ms to 3.1s: the near ones keep their payload from the start, the ones beyond the
	// 2s pre-read window are indexed without it and read back ahead of their due time.
	const n = 50
	for i := range n {
		e.schedule("orders", fmt.Sprintf(`{"id":%d}`, i), bridge.HeaderTaskID, fmt.Sprintf("order-%d", i),
			bridge.HeaderDelay, strconv.Itoa(100+i*60), "Trace-Id", "t-"+strconv.Itoa(i))
	}
	seen := map[string]bool{}
	for range n {
		f := c.next(t, 10*time.Second)
		m := f.msg
		id := m.Header.Get(bridge.HeaderTaskID)
		if seen[id] {
			t.Fatalf("task %s fired twice", id)
		}
		seen[id] = true
		due := dueAt(t, m)
		if f.at.Before(due) {
			t.Errorf("task %s fired %v early", id, due.Sub(f.at))
		}
		i, _ := strconv.Atoi(id[len("order-"):])
		if string(m.Data) != fmt.Sprintf(`{"id":%d}`, i) || m.Header.Get("Trace-Id") != "t-"+strconv.Itoa(i) ||
			m.Header.Get(bridge.HeaderBizType) != "orders" || m.Header.Get(bridge.HeaderAttempt) != "1" {
			t.Errorf("fire message %q %v", m.Data, m.Header)
		}
	}
	for i := range n {
		e.waitStatus(fmt.Sprintf("order-%d", i), kvstore.StatusSuccess, 5*time.Second)
	}
	c.none(t, 200*time.Millisecond)
}

// A consumer that always naks sees the retries at the backoff, then the task goes DEAD with an event.
func TestNakRetriesThenDead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{})
	dead := e.consume("ax.dead.pay", nil)
	c := e.consume("ax.fire.pay", func(m *nats.Msg) { _ = m.Nak() })
	e.schedule("pay", "p", bridge.HeaderTaskID, "pay-1", bridge.HeaderMaxRetry, "2", bridge.HeaderBackoff, "200ms,400ms")

	var prev time.Time
	for attempt := 1; attempt <= 3; attempt++ {
		f := c.next(t, 5*time.Second)
		if got := f.msg.Header.Get(bridge.HeaderAttempt); got != strconv.Itoa(attempt) {
			t.Fatalf("attempt header %s, want %d", got, attempt)
		}
		if attempt > 1 {
			wait := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond}[attempt-2]
			if gap := f.at.Sub(prev); gap < wait {
				t.Errorf("retry %d came after %v, want at least %v", attempt-1, gap, wait)
			}
		}
		prev = f.at
	}
	d := dead.next(t, 5*time.Second)
	if d.msg.Header.Get(bridge.HeaderTaskID) != "pay-1" || d.msg.Header.Get(bridge.HeaderAttempt) != "3" ||
		d.msg.Header.Get(bridge.HeaderError) != "nak" || string(d.msg.Data) != "p" {
		t.Errorf("dead event %q %v", d.msg.Data, d.msg.Header)
	}
	rec := e.waitStatus("pay-1", kvstore.StatusDead, 5*time.Second)
	if rec.Task.Attempt != 3 {
		t.Errorf("attempts %d, want 3", rec.Task.Attempt)
	}
	c.none(t, 300*time.Millisecond)
}

// Term ends the task at once with the consumer's reason; NakWithDelay overrides the backoff.
func TestTermAndNakWithDelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{})
	dead := e.consume("ax.dead.*", nil)
	c := e.consume("ax.fire.mail", func(m *nats.Msg) {
		if m.Header.Get(bridge.HeaderAttempt) == "1" {
			_ = m.NakWithDelay(300 * time.Millisecond)
			return
		}
		_ = m.Term()
	})
	// Term with a reason, via the body nats.go's TermWithReason sends.
	c2 := e.consume("ax.fire.sms", func(m *nats.Msg) { _ = m.Respond([]byte("+TERM bad phone number")) })
	e.schedule("mail", "m", bridge.HeaderTaskID, "mail-1", bridge.HeaderBackoff, "1h")
	e.schedule("sms", "s", bridge.HeaderTaskID, "sms-1")

	first := c.next(t, 5*time.Second)
	second := c.next(t, 5*time.Second)
	if gap := second.at.Sub(first.at); gap < 300*time.Millisecond || gap > 5*time.Second {
		t.Errorf("NakWithDelay(300ms): retry after %v (backoff was 1h)", gap)
	}
	rec := e.waitStatus("mail-1", kvstore.StatusDead, 5*time.Second)
	if rec.Task.Attempt != 2 {
		t.Errorf("attempts %d", rec.Task.Attempt)
	}
	c2.next(t, 5*time.Second)
	rec = e.waitStatus("sms-1", kvstore.StatusDead, 5*time.Second)
	if rec.Task.LastError != "bad phone number" || rec.Task.Attempt != 1 {
		t.Errorf("sms-1: %+v", rec.Task)
	}
	reasons := map[string]string{}
	for range 2 {
		d := dead.next(t, 5*time.Second)
		reasons[d.msg.Header.Get(bridge.HeaderTaskID)] = d.msg.Header.Get(bridge.HeaderError)
	}
	if reasons["mail-1"] != "terminated by consumer" || reasons["sms-1"] != "bad phone number" {
		t.Errorf("dead events: %v", reasons)
	}
	c.none(t, 200*time.Millisecond)
}

// InProgress restarts the ack wait: a consumer that takes longer than the ack wait but reports
// progress keeps its attempt; one that goes silent loses it to a retry with a higher attempt.
func TestInProgressAndLeaseExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{})
	slow := e.consume("ax.fire.report", func(m *nats.Msg) {
		go func() {
			for range 3 {
				<-time.After(600 * time.Millisecond) // the consumer's own work, 1.8s in all, ack wait 1s
				_ = m.InProgress()
			}
			_ = m.AckSync()
		}()
	})
	e.schedule("report", "r", bridge.HeaderTaskID, "report-1", bridge.HeaderAckWait, "1s")
	slow.next(t, 5*time.Second)
	e.waitStatus("report-1", kvstore.StatusSuccess, 5*time.Second)
	slow.none(t, 300*time.Millisecond)

	silent := e.consume("ax.fire.silent", nil)
	e.schedule("silent", "s", bridge.HeaderTaskID, "silent-1", bridge.HeaderAckWait, "1s", bridge.HeaderBackoff, "0s")
	f1 := silent.next(t, 5*time.Second)
	f2 := silent.next(t, 5*time.Second)
	// The lease starts at the claim, which is at or after the due time: no retry before due + ack wait.
	if f2.msg.Header.Get(bridge.HeaderAttempt) != "2" || f2.at.Sub(dueAt(t, f1.msg)) < time.Second {
		t.Errorf("retry after lease: attempt %s, %v after the first due time", f2.msg.Header.Get(bridge.HeaderAttempt), f2.at.Sub(dueAt(t, f1.msg)))
	}
	// A late ack for attempt 1 is stale and changes nothing.
	if err := f1.msg.AckSync(); err != nil {
		t.Fatal(err)
	}
	rec := e.waitStatus("silent-1", kvstore.StatusRunning, 2*time.Second)
	if rec.Task.Attempt != 2 {
		t.Errorf("stale ack changed the record: %+v", rec.Task)
	}
	_ = f2.msg.AckSync()
	e.waitStatus("silent-1", kvstore.StatusSuccess, 2*time.Second)
}

// With nobody subscribed the attempt fails at once (no-responders), not after the ack wait.
func TestNoSubscriber(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{})
	dead := e.consume("ax.dead.nobody", nil)
	start := time.Now()
	e.schedule("nobody", "x", bridge.HeaderTaskID, "nobody-1", bridge.HeaderMaxRetry, "1", bridge.HeaderBackoff, "100ms")
	d := dead.next(t, 10*time.Second)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("took %v: the 30s ack wait was waited out", took)
	}
	if d.msg.Header.Get(bridge.HeaderError) != "no responders" || d.msg.Header.Get(bridge.HeaderAttempt) != "2" {
		t.Errorf("dead event %v", d.msg.Header)
	}
	e.waitStatus("nobody-1", kvstore.StatusDead, 2*time.Second)
}

// `nats reply ax.fire.orders +ACK` and a plain empty reply are acks.
func TestReplyBodiesAck(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{})
	e.consume("ax.fire.cli", func(m *nats.Msg) { _ = m.Respond([]byte("+ACK")) })
	e.consume("ax.fire.empty", func(m *nats.Msg) { _ = m.Respond(nil) })
	e.schedule("cli", "x", bridge.HeaderTaskID, "cli-1")
	e.schedule("empty", "x", bridge.HeaderTaskID, "empty-1")
	e.waitStatus("cli-1", kvstore.StatusSuccess, 5*time.Second)
	e.waitStatus("empty-1", kvstore.StatusSuccess, 5*time.Second)
}

// Finished records stay readable for the retention time, then the server removes them (the TTL of
// their final write); the delete marker that leaves expires too, so the bucket does not grow with
// every task ever run.
func TestRetentionDeletesAndPurges(t *testing.T) {
	t.Parallel()
	storeCfg := kvstore.Config{Retention: time.Second, MarkerTTL: time.Second}
	srv := natstest.RunServer(t)
	e := newEnvOn(t, srv.ClientURL(), storeCfg)
	e.srv = srv
	e.startBridgeOn(srv.ClientURL(), storeCfg, bridge.Config{})
	e.consume("ax.fire.short", func(m *nats.Msg) { _ = m.Ack() })
	e.schedule("short", "x", bridge.HeaderTaskID, "short-1")
	done := e.waitStatus("short-1", kvstore.StatusSuccess, 5*time.Second)
	if !checkFor(10*time.Second, func() bool {
		_, err := e.store.Get(context.Background(), "short-1")
		return errors.Is(err, kvstore.ErrNotFound)
	}) {
		t.Fatal("finished record not deleted after its retention")
	}
	if gone := time.Since(time.UnixMilli(done.Task.FinishedAt)); gone < time.Second {
		t.Errorf("deleted %v after finishing, before the 1s retention", gone)
	}
	if !checkFor(15*time.Second, func() bool { return e.streamEmpty("KV_" + kvstore.DefaultBucket) }) {
		t.Fatal("delete marker not purged")
	}
}
