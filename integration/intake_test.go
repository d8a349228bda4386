package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/kvstore"
)

// scheduleRetrying publishes a schedule message through JetStream until the stream takes it
// (bounded): while the intake stream is being set up again there is nothing to take it.
func (e *env) scheduleRetrying(t *testing.T, biz, payload string, kv ...string) {
	t.Helper()
	m := nats.NewMsg(bridge.SchedulePrefix + biz)
	m.Data = []byte(payload)
	for i := 0; i+1 < len(kv); i += 2 {
		m.Header.Add(kv[i], kv[i+1])
	}
	var err error
	if !checkFor(15*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err = e.js.PublishMsg(ctx, m)
		return err == nil
	}) {
		t.Fatalf("schedule: %v", err)
	}
}

// A deleted intake consumer is set up again while the bridge runs, and the next schedule fires.
func TestIntakeConsumerDeletedIsRecreated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{})
	fires := e.consume("ax.fire.orders", func(m *nats.Msg) { _ = m.Ack() })
	e.schedule("orders", "a", bridge.HeaderTaskID, "before")
	if id := fires.next(t, 5*time.Second).msg.Header.Get(bridge.HeaderTaskID); id != "before" {
		t.Fatalf("fired %q", id)
	}
	if err := e.js.DeleteConsumer(context.Background(), "AX_SCHEDULE", "axbridge"); err != nil {
		t.Fatal(err)
	}
	e.schedule("orders", "b", bridge.HeaderTaskID, "after")
	if id := fires.next(t, 20*time.Second).msg.Header.Get(bridge.HeaderTaskID); id != "after" {
		t.Fatalf("fired %q", id)
	}
	if _, err := e.js.Consumer(context.Background(), "AX_SCHEDULE", "axbridge"); err != nil {
		t.Errorf("consumer after recovery: %v", err)
	}
}

// A deleted intake stream is set up again while the bridge runs, and the next schedule fires.
func TestIntakeStreamDeletedIsRecreated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{})
	fires := e.consume("ax.fire.orders", func(m *nats.Msg) { _ = m.Ack() })
	e.schedule("orders", "a", bridge.HeaderTaskID, "before")
	fires.next(t, 5*time.Second)
	if err := e.js.DeleteStream(context.Background(), "AX_SCHEDULE"); err != nil {
		t.Fatal(err)
	}
	e.scheduleRetrying(t, "orders", "b", bridge.HeaderTaskID, "after")
	if id := fires.next(t, 20*time.Second).msg.Header.Get(bridge.HeaderTaskID); id != "after" {
		t.Fatalf("fired %q", id)
	}
}

// A schedule the intake stream took, with payload and headers under the bridge's raw limit, but
// whose record would be over what the server takes in one message, is refused with
// PAYLOAD_TOO_LARGE at once (not retried forever), nothing is stored, and the next schedule fires.
// The header is 60 KB of 0xff bytes (JetStream takes at most 64 KB of headers), the payload fills
// the message to 2 KB under the server's 1 MiB: the record adds its metadata to that, whatever
// lossless form it keeps the header bytes in.
func TestOversizedBinaryHeaderRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{MaxPayload: 1 << 20})
	rejected := e.consume("ax.rejected.>", nil)
	fires := e.consume("ax.fire.orders", func(m *nats.Msg) { _ = m.Ack() })
	e.schedule("orders", strings.Repeat("p", 1<<20-60_000-2_000), bridge.HeaderTaskID, "blob-1", "Blob", strings.Repeat("\xff", 60_000))
	ev := rejected.next(t, 5*time.Second).msg
	if ev.Header.Get(bridge.HeaderErrorCode) != bridge.CodePayloadTooLarge || ev.Header.Get(bridge.HeaderTaskID) != "blob-1" {
		t.Fatalf("rejection %v", ev.Header)
	}
	t.Logf("%s: %s", ev.Header.Get(bridge.HeaderErrorCode), ev.Header.Get(bridge.HeaderError))
	e.mustNotExist("blob-1")
	e.schedule("orders", "y", bridge.HeaderTaskID, "next-1", bridge.HeaderDelay, "200ms")
	f := fires.next(t, 5*time.Second)
	if id := f.msg.Header.Get(bridge.HeaderTaskID); id != "next-1" {
		t.Fatalf("fired %q", id)
	}
	if due := dueAt(t, f.msg); f.at.Before(due) {
		t.Errorf("fired at %v, before its due time %v", f.at, due)
	}
	if !checkFor(5*time.Second, func() bool { return e.streamEmpty("AX_SCHEDULE") }) {
		t.Error("the refused message stays in the intake stream")
	}
	rejected.none(t, 100*time.Millisecond)
}

// binHeader is a header value with bytes that are not UTF-8.
const binHeader = "\xff\xfe-\xc3"

// The identical message with a header that is not UTF-8, sent twice, is a duplicate, not
// DUPLICATE_CONFLICT: the bridge compares what the client sent.
func TestBinaryHeaderTwiceIsDuplicate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{})
	rejected := e.consume("ax.rejected.>", nil)
	dups := e.consume("ax.duplicate.>", nil)
	for range 2 {
		e.schedule("orders", "x", bridge.HeaderTaskID, "bin-1", bridge.HeaderDelay, "1h", "Bin", binHeader)
	}
	if d := dups.next(t, 5*time.Second).msg; d.Header.Get(bridge.HeaderTaskID) != "bin-1" {
		t.Errorf("duplicate event %v", d.Header)
	}
	rejected.none(t, 100*time.Millisecond)
}

// A header value with bytes that are not UTF-8 fires byte for byte.
func TestBinaryHeaderFiresByteForByte(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{})
	fires := e.consume("ax.fire.orders", func(m *nats.Msg) { _ = m.Ack() })
	e.schedule("orders", "x", bridge.HeaderTaskID, "bin-2", "Bin", binHeader)
	f := fires.next(t, 10*time.Second).msg
	if got := f.Header.Values("Bin"); len(got) != 1 || got[0] != binHeader {
		t.Errorf("fired header Bin %q, want %q", got, binHeader)
	}
}

// An existing intake stream that could drop accepted schedules is refused with a reason.
func TestIntakeStreamThatDropsIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: "AX_SCHEDULE", Subjects: []string{"ax.schedule.>"}, MaxAge: time.Hour,
	}); err != nil {
		t.Fatal(err)
	}
	nc, _, store := openStore(t, e.srv.ClientURL(), kvstore.Config{})
	b, err := bridge.New(nc, store, bridge.Config{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	err = b.Start(context.Background())
	if err == nil {
		_ = b.Stop(context.Background())
		t.Fatal("Start accepted a stream with a max age")
	}
	if !strings.Contains(err.Error(), "max age") {
		t.Errorf("Start: %v, want the max age named", err)
	}
	t.Log(err)
}

// An operator's tuning of an existing intake consumer survives a bridge start.
func TestIntakeConsumerTuningKept(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "AX_SCHEDULE", Subjects: []string{"ax.schedule.>"}, Retention: jetstream.WorkQueuePolicy,
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.CreateConsumer(ctx, "AX_SCHEDULE", jetstream.ConsumerConfig{
		Durable: "axbridge", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute, MaxAckPending: 100, MaxDeliver: 7,
	}); err != nil {
		t.Fatal(err)
	}
	e.startBridge(bridge.Config{})
	fires := e.consume("ax.fire.orders", func(m *nats.Msg) { _ = m.Ack() })
	e.schedule("orders", "x", bridge.HeaderTaskID, "tuned-1")
	fires.next(t, 5*time.Second)
	cons, err := e.js.Consumer(ctx, "AX_SCHEDULE", "axbridge")
	if err != nil {
		t.Fatal(err)
	}
	if c := cons.CachedInfo().Config; c.AckWait != time.Minute || c.MaxAckPending != 100 || c.MaxDeliver != 7 {
		t.Errorf("consumer after start: ack wait %v, max ack pending %d, max deliver %d; want the operator's 1m, 100, 7",
			c.AckWait, c.MaxAckPending, c.MaxDeliver)
	}
}
