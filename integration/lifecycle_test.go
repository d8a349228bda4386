package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// Tasks fire at their due time, never before, once each, with the documented headers; the due
// time is the stream's acceptance plus Ax-Delay (it lies between the publish and its ack, plus the
// delay); p99 lateness over a spread of 300 tasks stays under a second (a loose bound that catches
// a lost timer or a fire held back; the benchmarks measure the real figure).
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

	// Delays of 100ms to 3.09s: the near ones keep their payload from the start, the ones beyond
	// the 2s pre-read window are indexed without it and read back ahead of their due time.
	const n = 300
	delay := func(i int) time.Duration { return time.Duration(100+i*10) * time.Millisecond }
	sent, acked := make([]time.Time, n), make([]time.Time, n)
	for i := range n {
		sent[i] = time.Now()
		e.schedule("orders", fmt.Sprintf(`{"id":%d}`, i), bridge.HeaderTaskID, fmt.Sprintf("order-%d", i),
			bridge.HeaderDelay, strconv.FormatInt(delay(i).Milliseconds(), 10), "Trace-Id", "t-"+strconv.Itoa(i))
		acked[i] = time.Now()
	}
	seen := map[string]bool{}
	var late []time.Duration
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
		// The stream accepted the message after its publish began and before its ack returned.
		if lo, hi := ceilMs(sent[i].Add(delay(i))), ceilMs(acked[i].Add(delay(i))); due.Before(lo) || due.After(hi) {
			t.Errorf("task %s: Ax-Due-At %s outside publish + Ax-Delay %s .. ack + Ax-Delay %s", id,
				due.Format(time.RFC3339Nano), lo.Format(time.RFC3339Nano), hi.Format(time.RFC3339Nano))
		}
		late = append(late, f.at.Sub(due))
		if string(m.Data) != fmt.Sprintf(`{"id":%d}`, i) || m.Header.Get("Trace-Id") != "t-"+strconv.Itoa(i) ||
			m.Header.Get(bridge.HeaderBizType) != "orders" || m.Header.Get(bridge.HeaderAttempt) != "1" {
			t.Errorf("fire message %q %v", m.Data, m.Header)
		}
	}
	checkLateness(t, late, time.Second)
	for i := range n {
		e.waitStatus(fmt.Sprintf("order-%d", i), kvstore.StatusSuccess, 5*time.Second)
	}
	c.none(t, 200*time.Millisecond)
}

// ceilMs is t rounded up to the millisecond, as the bridge rounds a due time (never early).
func ceilMs(t time.Time) time.Time {
	if r := t.Truncate(time.Millisecond); r.Before(t) {
		return r.Add(time.Millisecond)
	}
	return t
}

// checkLateness fails the test when the p99 of the lateness figures is over bound, and logs
// their spread.
func checkLateness(t *testing.T, late []time.Duration, bound time.Duration) {
	t.Helper()
	if len(late) == 0 {
		t.Fatal("no lateness figures")
	}
	sorted := slices.Clone(late)
	slices.Sort(sorted)
	p99 := sorted[min(len(sorted)-1, len(sorted)*99/100)]
	if p99 > bound {
		t.Errorf("p99 lateness %v over %d fires, over the bound of %v (%s)", p99, len(sorted), bound, durSpread(sorted))
	}
	t.Logf("lateness over %d fires: %s", len(sorted), durSpread(sorted))
}

// Ax-Delay counts from when the stream accepted the schedule message, not from when a bridge read
// it: schedules published while no bridge runs carry, once a bridge starts 2 s later, Ax-Due-At =
// the stream message's timestamp + Ax-Delay to the millisecond, in both directions; the ones due
// while no bridge ran fire at once, the others at that time (p99 lateness under a second), and
// none before it.
func TestDelayCountsFromStreamAcceptance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// A first bridge creates the intake stream and consumer, then stops.
	nc, _, store := openStore(t, e.srv.ClientURL(), kvstore.Config{})
	first, err := bridge.New(nc, store, bridge.Config{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-first.Ready()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.Stop(ctx); err != nil {
		t.Fatalf("stop the first bridge: %v", err)
	}
	stream, err := e.js.Stream(ctx, "AX_SCHEDULE")
	if err != nil {
		t.Fatal(err)
	}

	const n = 40
	delay := func(i int) time.Duration {
		if i%2 == 0 {
			return 500 * time.Millisecond // due while no bridge runs
		}
		return 3*time.Second + time.Duration(i)*20*time.Millisecond // due after the bridge started
	}
	want := map[string]time.Time{}
	for i := range n {
		id := fmt.Sprintf("acc-%d", i)
		m := nats.NewMsg(bridge.SchedulePrefix + "acc")
		m.Data = []byte(id)
		m.Header.Set(bridge.HeaderTaskID, id)
		m.Header.Set(bridge.HeaderDelay, delay(i).String())
		ack, err := e.js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := stream.GetMsg(ctx, ack.Sequence)
		if err != nil {
			t.Fatalf("the stream's message %d: %v", ack.Sequence, err)
		}
		want[id] = ceilMs(raw.Time.Add(delay(i)))
	}
	<-time.After(2 * time.Second) // no bridge runs meanwhile, by design
	c := e.consume("ax.fire.acc", func(m *nats.Msg) { _ = m.Ack() })
	started := time.Now()
	e.startBridge(bridge.Config{})
	var late []time.Duration
	for range n {
		f := c.next(t, 10*time.Second)
		id := f.msg.Header.Get(bridge.HeaderTaskID)
		due := dueAt(t, f.msg)
		w, ok := want[id]
		if !ok {
			t.Fatalf("fire of %q: not one of the tasks, or fired twice", id)
		}
		delete(want, id)
		if !due.Equal(w) {
			t.Errorf("task %s: Ax-Due-At %s, want the stream's acceptance + Ax-Delay = %s (%v off)", id,
				due.Format(time.RFC3339Nano), w.Format(time.RFC3339Nano), due.Sub(w))
		}
		if f.at.Before(w) {
			t.Errorf("task %s fired %v before its stream time + Ax-Delay", id, w.Sub(f.at))
		}
		if w.After(started) {
			late = append(late, f.at.Sub(w))
		} else if d := f.at.Sub(started); d > 5*time.Second {
			t.Errorf("task %s, due while no bridge ran, fired %v after the bridge started", id, d)
		}
	}
	checkLateness(t, late, time.Second)
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
	second := c.next(t, 30*time.Second)
	if gap := second.at.Sub(first.at); gap < 300*time.Millisecond || gap > 30*time.Second {
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
			for range 4 {
				<-time.After(time.Second) // the consumer's own work, 4s in all, ack wait 3s
				_ = m.InProgress()
			}
			_ = m.AckSync()
		}()
	})
	e.schedule("report", "r", bridge.HeaderTaskID, "report-1", bridge.HeaderAckWait, "3s")
	slow.next(t, 5*time.Second)
	e.waitStatus("report-1", kvstore.StatusSuccess, 10*time.Second)
	slow.none(t, 300*time.Millisecond)

	silent := e.consume("ax.fire.silent", nil)
	e.schedule("silent", "s", bridge.HeaderTaskID, "silent-1", bridge.HeaderAckWait, "3s", bridge.HeaderBackoff, "0s")
	f1 := silent.next(t, 5*time.Second)
	f2 := silent.next(t, 10*time.Second)
	// The lease starts at the claim, which is at or after the due time: no retry before due + ack wait.
	if f2.msg.Header.Get(bridge.HeaderAttempt) != "2" || f2.at.Sub(dueAt(t, f1.msg)) < 3*time.Second {
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
