package bridge

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// holdingStore holds the completion of the claim (the update to RUNNING) of task hold: it says on
// held that it holds it, and lets the bridge's completion (which publishes the fire) run once
// release is closed.
type holdingStore struct {
	*kvstore.MemStore
	hold    string
	held    chan struct{}
	release chan struct{}
}

func (s *holdingStore) UpdateAsync(ctx context.Context, t *kvstore.Task, rev uint64, done func(uint64, error)) {
	if t.Status != kvstore.StatusRunning || t.ID != s.hold {
		s.MemStore.UpdateAsync(ctx, t, rev, done)
		return
	}
	s.MemStore.UpdateAsync(ctx, t, rev, func(r uint64, err error) {
		close(s.held)
		<-s.release
		done(r, err)
	})
}

// signalHandler passes every log message to msgs (dropping none), for tests that wait for a step.
type signalHandler struct{ msgs chan string }

func (h signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h signalHandler) Handle(_ context.Context, r slog.Record) error {
	h.msgs <- r.Message
	return nil
}
func (h signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h signalHandler) WithGroup(string) slog.Handler      { return h }

// While a claim is in flight, Stop still takes acks: it waits for claims in flight (whose
// completions publish fires) before it drains the ack subscriptions. Here task a fired before
// Stop and its consumer acks (AckSync) while Stop waits for task b's claim: the ack is applied and
// answered. (Before, the ack subscriptions were drained first: the ack found nobody, and the
// attempt was refired after the restart.)
func TestStopTakesAcksWhileClaimsAreInFlight(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc := natstest.Connect(t, srv.ClientURL())
	store := &holdingStore{MemStore: kvstore.NewMemStore(0), hold: "b", held: make(chan struct{}), release: make(chan struct{})}
	logs := make(chan string, 1024)
	b, err := New(nc, store, Config{Logger: slog.New(signalHandler{logs})})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	user := natstest.Connect(t, srv.ClientURL())
	fires, err := user.SubscribeSync(FirePrefix + "orders")
	if err != nil {
		t.Fatal(err)
	}
	if err := user.Flush(); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(user)
	if err != nil {
		t.Fatal(err)
	}
	schedule := func(id string) {
		t.Helper()
		m := nats.NewMsg(SchedulePrefix + "orders")
		m.Header.Set(HeaderTaskID, id)
		if _, err := js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	schedule("a")
	fireA, err := fires.NextMsg(10 * time.Second)
	if err != nil || fireA.Header.Get(HeaderTaskID) != "a" {
		t.Fatalf("fire of a: %v %v", fireA, err)
	}
	schedule("b")
	select {
	case <-store.held:
	case <-time.After(10 * time.Second):
		t.Fatal("task b not claimed")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- b.Stop(ctx) }()
	waitLog(t, logs, "stop: waiting for claims in flight")
	if _, err := user.Request(fireA.Reply, []byte("+ACK"), 5*time.Second); err != nil {
		t.Errorf("AckSync of a while b's claim is in flight: %v", err)
	}
	if e, err := store.Get(context.Background(), "a"); err != nil || e.Task.Status != kvstore.StatusSuccess {
		t.Errorf("task a: %s, %v; want SUCCESS", e.Task.Status, err)
	}
	close(store.release) // b's fire goes out now, while Stop runs
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	if f, err := fires.NextMsg(5 * time.Second); err != nil || f.Header.Get(HeaderTaskID) != "b" {
		t.Errorf("fire of b, published from its claim during Stop: %v %v", f, err)
	}
}

// waitLog waits (bounded) for a log message starting with prefix.
func waitLog(t *testing.T, logs <-chan string, prefix string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case msg := <-logs:
			if strings.HasPrefix(msg, prefix) {
				return
			}
		case <-deadline:
			t.Fatalf("no log %q", prefix)
		}
	}
}
