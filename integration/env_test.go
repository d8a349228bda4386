package integration

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(cleanupAfter{m})
}

// cleanupAfter removes the bridge binary built for the subprocess tests once they all ran.
type cleanupAfter struct{ m *testing.M }

func (c cleanupAfter) Run() int {
	code := c.m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	return code
}

// env is one test's world: a real JetStream server, a client connection, the task bucket.
type env struct {
	t     testing.TB
	srv   *natstest.Server
	nc    *nats.Conn          // the user's side: publishes schedules, consumes fires
	js    jetstream.JetStream // on nc
	store *kvstore.JetStore
}

func newEnv(t testing.TB) *env {
	t.Helper()
	srv := natstest.RunServer(t)
	e := newEnvOn(t, srv.ClientURL(), kvstore.Config{})
	e.srv = srv
	return e
}

// newEnvOn is an env on the server(s) at url, with that bucket configuration, and no srv.
func newEnvOn(t testing.TB, url string, storeCfg kvstore.Config) *env {
	t.Helper()
	nc, js, store := openStore(t, url, storeCfg)
	return &env{t: t, nc: nc, js: js, store: store}
}

// openStore connects to url (closed when the test ends) and opens the task bucket on it.
func openStore(t testing.TB, url string, cfg kvstore.Config) (*nats.Conn, jetstream.JetStream, *kvstore.JetStore) {
	t.Helper()
	nc := natstest.Connect(t, url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := kvstore.OpenJetStore(context.Background(), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js, store
}

// testLogger writes the bridge's logs through t.Log.
func testLogger(t testing.TB) *slog.Logger {
	if !testing.Verbose() {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// startBridge runs a bridge on its own connection and bucket handle, stopped when the test ends.
func (e *env) startBridge(cfg bridge.Config) *bridge.Bridge {
	e.t.Helper()
	return e.startBridgeOn(e.srv.ClientURL(), kvstore.Config{}, cfg)
}

// startBridgeOn is startBridge on the server(s) at url, with that bucket configuration.
func (e *env) startBridgeOn(url string, storeCfg kvstore.Config, cfg bridge.Config) *bridge.Bridge {
	e.t.Helper()
	return e.startBridgeWrapped(url, storeCfg, cfg, nil)
}

// startBridgeWrapped is startBridgeOn with wrap (if not nil) between the bridge and its bucket.
func (e *env) startBridgeWrapped(url string, storeCfg kvstore.Config, cfg bridge.Config, wrap func(*kvstore.JetStore) bridge.Store) *bridge.Bridge {
	e.t.Helper()
	nc, _, js := openStore(e.t, url, storeCfg)
	var store bridge.Store = js
	if wrap != nil {
		store = wrap(js)
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(e.t)
	}
	b, err := bridge.New(nc, store, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Stop(ctx); err != nil {
			e.t.Errorf("stop bridge: %v", err)
		}
	})
	select {
	case <-b.Ready():
	case <-time.After(10 * time.Second):
		e.t.Fatal("bridge not ready")
	}
	return b
}

// schedule publishes a schedule message through JetStream (so it is durable when this returns).
func (e *env) schedule(biz string, payload string, kv ...string) {
	e.t.Helper()
	m := nats.NewMsg(bridge.SchedulePrefix + biz)
	m.Data = []byte(payload)
	for i := 0; i+1 < len(kv); i += 2 {
		m.Header.Add(kv[i], kv[i+1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.js.PublishMsg(ctx, m); err != nil {
		e.t.Fatalf("schedule: %v", err)
	}
}

// fired is one fire message as a consumer saw it.
type fired struct {
	msg *nats.Msg
	at  time.Time
}

// consumer receives what consume subscribed to, in order, with receive times.
type consumer struct {
	ch chan fired
}

// consume subscribes to subject and hands every message to handle (which replies), then queues it
// for next.
func (e *env) consume(subject string, handle func(m *nats.Msg)) *consumer {
	e.t.Helper()
	c := &consumer{ch: make(chan fired, 100000)}
	sub, err := e.nc.Subscribe(subject, func(m *nats.Msg) {
		f := fired{msg: m, at: time.Now()}
		if handle != nil {
			handle(m)
		}
		c.ch <- f
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.nc.Flush(); err != nil {
		e.t.Fatal(err)
	}
	return c
}

// next waits for the next message (bounded).
func (c *consumer) next(t *testing.T, within time.Duration) fired {
	t.Helper()
	select {
	case f := <-c.ch:
		return f
	case <-time.After(within):
		t.Fatalf("no message within %v", within)
		return fired{}
	}
}

// none checks that no further message arrives within d.
func (c *consumer) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case f := <-c.ch:
		t.Fatalf("unexpected message %s %v", f.msg.Subject, f.msg.Header)
	case <-time.After(d):
	}
}

// waitStatus polls the record until it has the status (bounded).
func (e *env) waitStatus(id string, want kvstore.Status, within time.Duration) kvstore.Entry {
	e.t.Helper()
	var last kvstore.Entry
	var lastErr error
	if !checkFor(within, func() bool {
		last, lastErr = e.store.Get(context.Background(), id)
		return lastErr == nil && last.Task.Status == want
	}) {
		e.t.Fatalf("task %s: status %s (err %v), want %s", id, last.Task.Status, lastErr, want)
	}
	return last
}

// checkFor polls cond every 10ms until it holds or within has passed.
func checkFor(within time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-deadline.C:
			return cond()
		case <-tick.C:
		}
	}
}

// streamEmpty reports whether the stream exists and holds no messages.
func (e *env) streamEmpty(name string) bool {
	s, err := e.js.Stream(context.Background(), name)
	if err != nil {
		return false
	}
	info, err := s.Info(context.Background())
	return err == nil && info.State.Msgs == 0
}

// streamMsgs is how many messages the stream holds (0 if it cannot be read).
func (e *env) streamMsgs(name string) uint64 {
	s, err := e.js.Stream(context.Background(), name)
	if err != nil {
		return 0
	}
	info, err := s.Info(context.Background())
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

func (e *env) mustNotExist(id string) {
	e.t.Helper()
	if _, err := e.store.Get(context.Background(), id); !errors.Is(err, kvstore.ErrNotFound) {
		e.t.Fatalf("task %s: got err %v, want not found", id, err)
	}
}

// dueAt parses the Ax-Due-At header.
func dueAt(t *testing.T, m *nats.Msg) time.Time {
	t.Helper()
	d, err := time.Parse(time.RFC3339Nano, m.Header.Get(bridge.HeaderDueAt))
	if err != nil {
		t.Fatalf("Ax-Due-At %q: %v", m.Header.Get(bridge.HeaderDueAt), err)
	}
	return d
}
