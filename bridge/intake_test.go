package bridge

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/axbridge/axbridge/internal/faultstore"
	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// intakeMsg is a schedule message as the intake consumer delivers it, recording how it was settled.
type intakeMsg struct {
	jetstream.Msg // not called: the methods onSchedule uses are below
	subject       string
	header        nats.Header
	data          []byte
	delivered     uint64
	settled       chan string // "ack", "term", "nak <delay>"
}

func newIntakeMsg(id string, delivered uint64) *intakeMsg {
	return &intakeMsg{subject: "ax.schedule.orders", header: nats.Header{HeaderTaskID: {id}}, data: []byte("x"),
		delivered: delivered, settled: make(chan string, 1)}
}

func (m *intakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{NumDelivered: m.delivered, Timestamp: time.Now(), Sequence: jetstream.SequencePair{Stream: 1}}, nil
}
func (m *intakeMsg) Subject() string      { return m.subject }
func (m *intakeMsg) Headers() nats.Header { return m.header }
func (m *intakeMsg) Data() []byte         { return m.data }
func (m *intakeMsg) Ack() error           { m.settled <- "ack"; return nil }
func (m *intakeMsg) Term() error          { m.settled <- "term"; return nil }
func (m *intakeMsg) Nak() error           { m.settled <- "nak"; return nil }
func (m *intakeMsg) NakWithDelay(d time.Duration) error {
	m.settled <- fmt.Sprintf("nak %v", d)
	return nil
}

// failingStore fails every create with err while err is set.
type failingStore struct {
	*kvstore.MemStore
	mu  sync.Mutex
	err error
}

func (s *failingStore) fail(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

func (s *failingStore) CreateAsync(ctx context.Context, t *kvstore.Task, done func(kvstore.Entry, error)) {
	s.mu.Lock()
	err := s.err
	s.mu.Unlock()
	if err != nil {
		go done(kvstore.Entry{}, fmt.Errorf("create %s: %w", t.ID, err))
		return
	}
	s.MemStore.CreateAsync(ctx, t, done)
}

// syncBuffer is a log sink for several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A store error that sending again cannot mend is refused with STORE_REFUSED at once; an outage
// is retried with a delay that grows with each delivery, and the last delivery is refused with
// STORE_UNAVAILABLE and terminated, so no message holds the consumer for good. The outage is
// logged once when it begins and once when it ends, with a count, not once per message.
func TestIntakeStoreErrors(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc := natstest.Connect(t, srv.ClientURL())
	rejected, err := nc.SubscribeSync(RejectedPrefix + ">")
	if err != nil {
		t.Fatal(err)
	}
	store := &failingStore{MemStore: kvstore.NewMemStore(0)}
	logs := &syncBuffer{}
	reg := prometheus.NewRegistry()
	b, err := New(nc, store, Config{IntakeMaxDeliver: 5, Registerer: reg, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	settle := func(m *intakeMsg) string {
		t.Helper()
		b.onSchedule(m)
		select {
		case s := <-m.settled:
			return s
		case <-time.After(10 * time.Second):
			t.Fatal("message not settled")
			return ""
		}
	}
	nextRejection := func() string {
		t.Helper()
		r, err := rejected.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("no rejection: %v", err)
		}
		return r.Header.Get(HeaderErrorCode)
	}

	store.fail(fmt.Errorf("publish: %w", nats.ErrMaxPayload))
	if got := settle(newIntakeMsg("big", 1)); got != "ack" {
		t.Errorf("permanent error: message settled with %q, want ack", got)
	}
	if code := nextRejection(); code != CodeStoreRefused {
		t.Errorf("permanent error: rejected with %q, want %s", code, CodeStoreRefused)
	}

	store.fail(fmt.Errorf("kvstore: no answer, outcome unknown: %w", context.DeadlineExceeded))
	for delivered, want := range map[uint64]string{1: "nak 1s", 2: "nak 2s", 3: "nak 4s", 4: "nak 8s"} {
		if got := settle(newIntakeMsg("o-1", delivered)); got != want {
			t.Errorf("outage, delivery %d: settled with %q, want %q", delivered, got, want)
		}
	}
	if got := settle(newIntakeMsg("o-1", 5)); got != "term" {
		t.Errorf("outage, last delivery: settled with %q, want term", got)
	}
	if code := nextRejection(); code != CodeStoreUnavailable {
		t.Errorf("outage, last delivery: rejected with %q, want %s", code, CodeStoreUnavailable)
	}
	if d := intakeRetryDelay(40); d != intakeRetryMax {
		t.Errorf("delay after delivery 40: %v, want %v", d, intakeRetryMax)
	}

	store.fail(nil)
	if got := settle(newIntakeMsg("o-1", 1)); got != "ack" {
		t.Errorf("store back: settled with %q, want ack", got)
	}
	if _, err := rejected.NextMsg(100 * time.Millisecond); err == nil {
		t.Error("a stored task was also rejected")
	}

	checkStoreErrorsReported(t, reg, logs.String())
}

// checkStoreErrorsReported checks the metrics and logs of TestIntakeStoreErrors: six failed
// creates, five of unknown outcome, four redeliveries, and one outage logged with its end.
func checkStoreErrorsReported(t *testing.T, reg *prometheus.Registry, out string) {
	t.Helper()
	if got := metricValue(t, reg, "ax_store_errors_total", "create"); got != 6 {
		t.Errorf("ax_store_errors_total{op=create} = %v, want 6", got)
	}
	if got := metricValue(t, reg, "ax_store_unknown_outcomes_total", "create"); got != 5 {
		t.Errorf("ax_store_unknown_outcomes_total{op=create} = %v, want 5", got)
	}
	if got := metricValue(t, reg, "ax_intake_redeliveries_total"); got != 4 {
		t.Errorf("ax_intake_redeliveries_total = %v, want 4", got)
	}
	if n := strings.Count(out, "task store unavailable"); n != 1 {
		t.Errorf("outage logged %d times, want once:\n%s", n, out)
	}
	if !strings.Contains(out, "task store available again") || !strings.Contains(out, "failed_writes=5") {
		t.Errorf("end of the outage not logged with its count:\n%s", out)
	}
}

// Stop during a Start that waits on a request nobody answers returns within its own context, and
// the Start ends too: Start holds no lock that Stop needs while it is on the network.
func TestStopDuringStuckStart(t *testing.T) {
	t.Parallel()
	// A server without JetStream, where a subscriber takes the JetStream API requests and never
	// answers: the bridge's first request waits for good.
	plain, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	plain.Start()
	t.Cleanup(func() { plain.Shutdown(); plain.WaitForShutdown() })
	if !plain.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	bnc := natstest.Connect(t, plain.ClientURL())
	asked := make(chan struct{}, 1)
	swallow, err := bnc.Subscribe("$JS.API.>", func(*nats.Msg) {
		select {
		case asked <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer swallow.Unsubscribe()
	b, err := New(bnc, kvstore.NewMemStore(0), Config{})
	if err != nil {
		t.Fatal(err)
	}
	startCtx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	started := make(chan error, 1)
	go func() { started <- b.Start(startCtx) }()
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("Start sent no request")
	}
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer stopCancel()
	stopped := make(chan error, 1)
	go func() { stopped <- b.Stop(stopCtx) }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Errorf("Stop during a stuck Start: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Stop did not return while Start waited on the network")
	}
	select {
	case err := <-started:
		if err == nil {
			t.Error("Start succeeded although Stop ended it")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Start did not end after Stop")
	}
	if err := b.Stop(stopCtx); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// metricValue reads a counter from reg by name and label values (in label order).
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i, l := range m.GetLabel() {
				if i >= len(labels) || l.GetValue() != labels[i] {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// The server's advisory for an intake message that used up its deliveries unsettled (a bridge
// stopped during the last one) is logged and counted.
func TestIntakeMaxDeliveriesAdvisory(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc := natstest.Connect(t, srv.ClientURL())
	reg := prometheus.NewRegistry()
	b, err := New(nc, kvstore.NewMemStore(0), Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := b.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	adv := `{"type":"io.nats.jetstream.advisory.v1.max_deliver","stream":"AX_SCHEDULE","consumer":"axbridge","stream_seq":7,"deliveries":20}`
	if err := nc.Publish("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.AX_SCHEDULE.axbridge", []byte(adv)); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for metricValue(t, reg, "ax_intake_max_deliveries_total") != 1 {
		select {
		case <-deadline:
			t.Fatal("advisory not counted")
		case <-tick.C:
		}
	}
}

// A create that landed but whose answer was lost (outcome unknown) is retried, and the redelivery
// finds the task it wrote: a duplicate, acked, not DUPLICATE_CONFLICT, even when the replica that
// takes the redelivery runs with other defaults.
func TestIntakeUnknownOutcomeThenDuplicate(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc := natstest.Connect(t, srv.ClientURL())
	events, err := nc.SubscribeSync("ax.*.orders")
	if err != nil {
		t.Fatal(err)
	}
	store := faultstore.New(kvstore.NewMemStore(0))
	store.Inject(faultstore.Rule{Op: faultstore.OpCreate, Mode: faultstore.ApplyThenTimeout, Times: 1})
	first, err := New(nc, store, Config{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(nc, store, Config{Backoff: []time.Duration{time.Second}, MaxAttempts: 2, AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	settle := func(b *Bridge, m *intakeMsg) string {
		t.Helper()
		b.onSchedule(m)
		select {
		case s := <-m.settled:
			return s
		case <-time.After(10 * time.Second):
			t.Fatal("message not settled")
			return ""
		}
	}
	msg := func(delivered uint64) *intakeMsg {
		m := newIntakeMsg("order-9", delivered)
		m.header.Set("Trace", "\xff\xfe")
		return m
	}
	if got := settle(first, msg(1)); got != "nak 1s" {
		t.Fatalf("unknown outcome: settled with %q, want nak 1s", got)
	}
	if got := settle(other, msg(2)); got != "ack" {
		t.Fatalf("redelivery: settled with %q, want ack", got)
	}
	ev, err := events.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Subject != DuplicatePrefix+"orders" || ev.Header.Get(HeaderTaskID) != "order-9" {
		t.Errorf("event on %s %v, want a duplicate of order-9", ev.Subject, ev.Header)
	}
}

// The intake consumer the bridge creates has no max deliver: the server never gives a message up
// (it would lie unsettled below the ack floor, where a purge removes it); the bridge bounds the
// deliveries itself. A message delivered more often than the consumer's max deliver used to be
// (IntakeMaxDeliver+2), every time unsettled (a bridge that stopped during each), is delivered
// again, stored and acked, and then purged.
func TestIntakeConsumerNeverGivesUp(t *testing.T) {
	t.Parallel()
	r := newPurgeRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mem := kvstore.NewMemStore(0)
	first, err := New(natstest.Connect(t, r.srv.ClientURL()), mem, Config{IntakeMaxDeliver: 2, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cons, err := r.js.Consumer(ctx, "AX_SCHEDULE", "axbridge")
	if err != nil {
		t.Fatal(err)
	}
	if got := cons.CachedInfo().Config.MaxDeliver; got != -1 {
		t.Errorf("intake consumer max deliver %d, want -1 (none)", got)
	}
	if got := first.maxDeliver.Load(); got != 2 {
		t.Errorf("the bridge settles at delivery %d, want 2", got)
	}
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	seq := r.schedule("unsettled")
	const deliveries = 2 + 2 + 3 // past the old max deliver, IntakeMaxDeliver+2
	for i := 1; i <= deliveries; i++ {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var got []jetstream.Msg
		for m := range batch.Messages() {
			got = append(got, m)
		}
		if len(got) != 1 {
			t.Fatalf("delivery %d: %d messages (%v), want the schedule again", i, len(got), batch.Error())
		}
		md, err := got[0].Metadata()
		if err != nil || md.Sequence.Stream != seq || md.NumDelivered != uint64(i) {
			t.Fatalf("delivery %d: %+v %v, want stream seq %d delivered %d times", i, md, err, seq, i)
		}
		if err := got[0].Nak(); err != nil { // as a bridge that stops before settling it
			t.Fatal(err)
		}
	}

	r.start(mem, Config{IntakeMaxDeliver: 2, Registerer: prometheus.NewRegistry()})
	r.waitFor("the schedule stored at its delivery past the old limit", stored(mem, "unsettled"))
	r.waitFor("the schedule acked and purged", func() bool { return r.state().Msgs == 0 })
}

// An operator's intake consumer with a max deliver is kept: the bridge settles a message it
// cannot store two deliveries before that limit.
func TestIntakeOperatorMaxDeliverKept(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc := natstest.Connect(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "AX_SCHEDULE", Subjects: []string{SchedulePrefix + ">"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(ctx, "AX_SCHEDULE", jetstream.ConsumerConfig{Durable: "axbridge", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 6}); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	b, err := New(nc, kvstore.NewMemStore(0), Config{IntakeMaxDeliver: 20, Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := b.ensureIntake(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := cons.CachedInfo().Config.MaxDeliver; got != 6 {
		t.Errorf("consumer max deliver %d, want the operator's 6", got)
	}
	if got := b.maxDeliver.Load(); got != 6-intakeDeliverSpare {
		t.Errorf("the bridge settles at delivery %d, want %d", got, 6-intakeDeliverSpare)
	}
	if out := logs.String(); !strings.Contains(out, "intake consumer has a max deliver") || !strings.Contains(out, "--max-deliver=-1") {
		t.Errorf("no warning about the consumer's max deliver:\n%s", out)
	}
}
