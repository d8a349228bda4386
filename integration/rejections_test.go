package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/kvstore"
)

// Every kind of bad schedule message, through a real server: an event on ax.rejected.<bizType>
// with a stable code, a readable reason and the task id echoed as sent; nothing stored, nothing
// fired, and the bridge goes on (a good task after the bad ones still fires).
func TestBadInputTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{MaxPayload: 1024, MaxHorizon: 24 * time.Hour, PastTolerance: time.Minute})
	rejected := e.consume("ax.rejected.>", nil)
	fires := e.consume("ax.fire.>", func(m *nats.Msg) { _ = m.Ack() })

	// An existing task for the conflict row.
	e.schedule("orders", "first", bridge.HeaderTaskID, "dup-1", bridge.HeaderDelay, "1h")
	e.waitStatus("dup-1", kvstore.StatusWaiting, 5*time.Second)

	past := time.Now().Add(-2 * time.Minute).UTC().Format(time.RFC3339Nano)
	rows := []struct {
		name, subject, taskID string
		header                []string
		payload               string
		code, onSubject       string
	}{
		{"multi-token bizType", "ax.schedule.orders.eu", "r1", nil, "x", bridge.CodeBadBizType, "ax.rejected._invalid"},
		{"wildcard bizType", "ax.schedule.*", "r2", nil, "x", bridge.CodeBadBizType, "ax.rejected._invalid"},
		{"bad characters", "ax.schedule.or~ders", "r3", nil, "x", bridge.CodeBadBizType, "ax.rejected._invalid"},
		{"bizType too long", "ax.schedule." + strings.Repeat("b", 65), "r4", nil, "x", bridge.CodeBadBizType, "ax.rejected._invalid"},
		{"negative delay", "ax.schedule.orders", "r5", []string{bridge.HeaderDelay, "-5s"}, "x", bridge.CodeBadDelay, "ax.rejected.orders"},
		{"overflowing delay", "ax.schedule.orders", "r6", []string{bridge.HeaderDelay, "99999999999999999999h"}, "x", bridge.CodeBadDelay, "ax.rejected.orders"},
		{"unparseable delay", "ax.schedule.orders", "r7", []string{bridge.HeaderDelay, "soon"}, "x", bridge.CodeBadDelay, "ax.rejected.orders"},
		{"unparseable deliver-at", "ax.schedule.orders", "r8", []string{bridge.HeaderDeliverAt, "tomorrow"}, "x", bridge.CodeBadDeliverAt, "ax.rejected.orders"},
		{"far past", "ax.schedule.orders", "r9", []string{bridge.HeaderDeliverAt, past}, "x", bridge.CodeDueInPast, "ax.rejected.orders"},
		{"beyond horizon", "ax.schedule.orders", "r10", []string{bridge.HeaderDelay, "48h"}, "x", bridge.CodeBeyondHorizon, "ax.rejected.orders"},
		{"delay and deliver-at", "ax.schedule.orders", "r11", []string{bridge.HeaderDelay, "1s", bridge.HeaderDeliverAt, "0"}, "x", bridge.CodeDelayAndDeliverAt, "ax.rejected.orders"},
		{"bad max-retry", "ax.schedule.orders", "r12", []string{bridge.HeaderMaxRetry, "lots"}, "x", bridge.CodeBadMaxRetry, "ax.rejected.orders"},
		{"negative max-retry", "ax.schedule.orders", "r13", []string{bridge.HeaderMaxRetry, "-1"}, "x", bridge.CodeBadMaxRetry, "ax.rejected.orders"},
		{"bad ack-wait", "ax.schedule.orders", "r14", []string{bridge.HeaderAckWait, "1ms"}, "x", bridge.CodeBadAckWait, "ax.rejected.orders"},
		{"bad backoff", "ax.schedule.orders", "r15", []string{bridge.HeaderBackoff, "10s,oops"}, "x", bridge.CodeBadBackoff, "ax.rejected.orders"},
		{"invalid task id", "ax.schedule.orders", "bad id!", nil, "x", bridge.CodeBadTaskID, "ax.rejected.orders"},
		{"payload over the limit", "ax.schedule.orders", "r17", nil, strings.Repeat("p", 2000), bridge.CodePayloadTooLarge, "ax.rejected.orders"},
		{"series: every too short", "ax.schedule.orders", "s1", []string{bridge.HeaderEvery, "500ms"}, "x", bridge.CodeBadEvery, "ax.rejected.orders"},
		{"series: bad cron", "ax.schedule.orders", "s2", []string{bridge.HeaderCron, "61 * * * *"}, "x", bridge.CodeBadCron, "ax.rejected.orders"},
		{"series: bad zone", "ax.schedule.orders", "s3", []string{bridge.HeaderCron, "@hourly", bridge.HeaderTimeZone, "Mars/Olympus"}, "x", bridge.CodeBadTimeZone, "ax.rejected.orders"},
		{"series: every and cron", "ax.schedule.orders", "s4", []string{bridge.HeaderCron, "@hourly", bridge.HeaderEvery, "1m"}, "x", bridge.CodeEveryAndCron, "ax.rejected.orders"},
		{"series: bad misfire", "ax.schedule.orders", "s5", []string{bridge.HeaderEvery, "1m", bridge.HeaderMisfire, "later"}, "x", bridge.CodeBadSeriesPolicy, "ax.rejected.orders"},
		{"series: overlap allow", "ax.schedule.orders", "s6", []string{bridge.HeaderEvery, "1m", bridge.HeaderOverlap, "allow"}, "x", bridge.CodeBadSeriesPolicy, "ax.rejected.orders"},
		{"series: policy without a spec", "ax.schedule.orders", "s7", []string{bridge.HeaderMaxRuns, "3"}, "x", bridge.CodeBadSeriesPolicy, "ax.rejected.orders"},
		{"replace: not a bool", "ax.schedule.orders", "s8", []string{bridge.HeaderReplace, "yes"}, "x", bridge.CodeBadReplace, "ax.rejected.orders"},
		{"series: jitter past the interval", "ax.schedule.orders", "s8", []string{bridge.HeaderEvery, "1m", bridge.HeaderJitter, "2m"}, "x", bridge.CodeBadSeriesPolicy, "ax.rejected.orders"},
		{"series: no tick before until", "ax.schedule.orders", "s9", []string{bridge.HeaderEvery, "1h", bridge.HeaderUntil, "1000"}, "x", bridge.CodeBadSeriesPolicy, "ax.rejected.orders"},
		{"duplicate with different content", "ax.schedule.orders", "dup-1", []string{bridge.HeaderDelay, "1h"}, "second", bridge.CodeDuplicateConflict, "ax.rejected.orders"},
	}
	for _, r := range rows {
		m := nats.NewMsg(r.subject)
		m.Data = []byte(r.payload)
		m.Header.Set(bridge.HeaderTaskID, r.taskID)
		for i := 0; i+1 < len(r.header); i += 2 {
			m.Header.Set(r.header[i], r.header[i+1])
		}
		// A plain core publish, as `nats pub` does; the stream captures it.
		if err := e.nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		ev := rejected.next(t, 5*time.Second).msg
		if ev.Subject != r.onSubject || ev.Header.Get(bridge.HeaderErrorCode) != r.code ||
			ev.Header.Get(bridge.HeaderTaskID) != r.taskID || ev.Header.Get(bridge.HeaderError) == "" ||
			ev.Header.Get(bridge.HeaderSubject) != r.subject || len(ev.Data) != 0 {
			t.Errorf("%s: event on %s: code %q, task id %q, reason %q, subject %q, body %d bytes",
				r.name, ev.Subject, ev.Header.Get(bridge.HeaderErrorCode), ev.Header.Get(bridge.HeaderTaskID),
				ev.Header.Get(bridge.HeaderError), ev.Header.Get(bridge.HeaderSubject), len(ev.Data))
		}
		t.Logf("%s: %s: %s", r.name, ev.Header.Get(bridge.HeaderErrorCode), ev.Header.Get(bridge.HeaderError))
		if r.taskID != "dup-1" && kvstore.ValidateID(r.taskID) == nil {
			e.mustNotExist(r.taskID)
		}
	}
	rec := e.waitStatus("dup-1", kvstore.StatusWaiting, time.Second)
	if string(rec.Task.Payload) != "first" {
		t.Errorf("the conflicting duplicate changed the first task: %q", rec.Task.Payload)
	}
	// The service goes on.
	e.schedule("orders", "good", bridge.HeaderTaskID, "good-1")
	if f := fires.next(t, 5*time.Second); f.msg.Header.Get(bridge.HeaderTaskID) != "good-1" {
		t.Errorf("fired %v", f.msg.Header)
	}
	fires.none(t, 200*time.Millisecond)
	rejected.none(t, 100*time.Millisecond)
}

// A repeated schedule with identical content is a duplicate: reported, stored once, fired once.
// Without Ax-Task-Id every message is its own task.
func TestDuplicateIdentical(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{})
	dups := e.consume("ax.duplicate.>", nil)
	fires := e.consume("ax.fire.coupons", func(m *nats.Msg) { _ = m.Ack() })
	for range 3 {
		e.schedule("coupons", "c", bridge.HeaderTaskID, "coupon-7", bridge.HeaderDelay, "300ms", "K", "v")
	}
	for range 2 {
		d := dups.next(t, 5*time.Second).msg
		if d.Subject != "ax.duplicate.coupons" || d.Header.Get(bridge.HeaderTaskID) != "coupon-7" {
			t.Errorf("duplicate event %s %v", d.Subject, d.Header)
		}
	}
	fires.next(t, 5*time.Second)
	e.schedule("coupons", "anon")
	e.schedule("coupons", "anon")
	ids := map[string]bool{}
	for range 2 {
		ids[fires.next(t, 5*time.Second).msg.Header.Get(bridge.HeaderTaskID)] = true
	}
	if len(ids) != 2 {
		t.Errorf("two anonymous schedules fired as %v", ids)
	}
	fires.none(t, 500*time.Millisecond)
}
