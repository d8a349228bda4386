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

// holdingStore holds the completion of every claim (an update to RUNNING) until release is
// closed, and says on held when one is held.
type holdingStore struct {
	*kvstore.MemStore
	held    chan string
	release chan struct{}
}

func (s *holdingStore) UpdateAsync(ctx context.Context, t *kvstore.Task, rev uint64, done func(uint64, error)) {
	if t.Status != kvstore.StatusRunning {
		s.MemStore.UpdateAsync(ctx, t, rev, done)
		return
	}
	s.MemStore.UpdateAsync(ctx, t, rev, func(r uint64, err error) {
		s.held <- t.ID
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

// A claim that completes while Stop runs still publishes its fire, and the consumer's ack of it is
// applied: Stop waits for claims in flight before it stops taking acks. (Before, the ack
// subscription was drained first, the reply was dropped and the attempt refired after the
// restart.)
func TestStopAppliesAcksOfClaimsInFlight(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc := natstest.Connect(t, srv.ClientURL())
	store := &holdingStore{MemStore: kvstore.NewMemStore(0), held: make(chan string, 1), release: make(chan struct{})}
	logs := make(chan string, 1024)
	b, err := New(nc, store, Config{Logger: slog.New(signalHandler{logs})})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	user := natstest.Connect(t, srv.ClientURL())
	if _, err := user.Subscribe(FirePrefix+"orders", func(m *nats.Msg) { _ = m.Respond([]byte("+ACK")) }); err != nil {
		t.Fatal(err)
	}
	if err := user.Flush(); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(user)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(SchedulePrefix + "orders")
	m.Header.Set(HeaderTaskID, "order-1")
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	select {
	case <-store.held:
	case <-time.After(10 * time.Second):
		t.Fatal("task not claimed")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- b.Stop(ctx) }()
	waitLog(t, logs, "stop: waiting for claims in flight")
	close(store.release)
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	e, err := store.Get(context.Background(), "order-1")
	if err != nil || e.Task.Status != kvstore.StatusSuccess {
		t.Fatalf("task after stop: %s, %v; want SUCCESS (the ack applied)", e.Task.Status, err)
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
