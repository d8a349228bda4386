package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/faultstore"
	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// /healthz and /readyz on the metrics listener follow the bridge through its life on a real
// server: 503 before the bridge exists and before it starts, 200 once it runs and has loaded the
// bucket, 503 naming the watch while the task watch is down, 503 while the server is gone and 200
// again after it is back, 503 naming the connection once it is closed, and 503 after Stop.
func TestHealthEndpoints(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc := natstest.Connect(t, srv.ClientURL())
	fs := faultstore.New(openStore(t, nc))
	hc := &health{}
	base := serveHealth(t, prometheus.NewRegistry(), hc)

	expect(t, base, "/healthz", http.StatusServiceUnavailable, "starting")
	expect(t, base, "/readyz", http.StatusServiceUnavailable, "starting")
	reg := prometheus.NewRegistry()
	b, err := bridge.New(nc, fs, bridge.Config{ReplicaID: "health-1", Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	hc.set(b)
	expect(t, base, "/healthz", http.StatusServiceUnavailable, "not running")
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			stopBridge(t, b)
		}
	})
	expect(t, base, "/healthz", http.StatusOK, "ok")
	expect(t, base, "/readyz", http.StatusOK, "ok")

	// The task watch ends and cannot be started again.
	fs.Inject(faultstore.Rule{Op: faultstore.OpWatch, Mode: faultstore.FailBefore})
	fs.EndWatches()
	expect(t, base, "/healthz", http.StatusServiceUnavailable, "task watch")
	expect(t, base, "/readyz", http.StatusServiceUnavailable, "task watch")
	fs.Clear()
	expect(t, base, "/healthz", http.StatusOK, "ok")
	expect(t, base, "/readyz", http.StatusOK, "ok")

	// The server goes away: not ready while the connection is down; back once it returns.
	srv.Shutdown()
	expect(t, base, "/readyz", http.StatusServiceUnavailable, "")
	srv.Restart(t)
	expect(t, base, "/healthz", http.StatusOK, "ok")
	expect(t, base, "/readyz", http.StatusOK, "ok")

	nc.Close()
	expect(t, base, "/healthz", http.StatusServiceUnavailable, "connection is closed")
	expect(t, base, "/readyz", http.StatusServiceUnavailable, "connection is closed")
	stopped = true
	stopBridge(t, b)
	expect(t, base, "/healthz", http.StatusServiceUnavailable, "not running")
	expect(t, base, "/readyz", http.StatusServiceUnavailable, "not running")
}

// A bridge whose initial load has not ended is healthy but not ready.
func TestReadyzWaitsForInitialLoad(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc := natstest.Connect(t, srv.ClientURL())
	hc := &health{}
	base := serveHealth(t, prometheus.NewRegistry(), hc)
	b, err := bridge.New(nc, endlessLoad{openStore(t, nc)}, bridge.Config{ReplicaID: "health-2", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	hc.set(b)
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopBridge(t, b) })
	expect(t, base, "/healthz", http.StatusOK, "ok")
	expect(t, base, "/readyz", http.StatusServiceUnavailable, "initial load")
}

// endlessLoad is a store whose watch never reports the end of its initial values.
type endlessLoad struct{ *kvstore.JetStore }

func (endlessLoad) Watch(context.Context, ...int) (kvstore.Watcher, error) {
	return &silentWatch{events: make(chan kvstore.Event)}, nil
}

type silentWatch struct {
	events chan kvstore.Event
	once   sync.Once
}

func (w *silentWatch) Events() <-chan kvstore.Event { return w.events }
func (w *silentWatch) Stop() error                  { w.once.Do(func() { close(w.events) }); return nil }

func openStore(t *testing.T, nc *nats.Conn) *kvstore.JetStore {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := kvstore.OpenJetStore(context.Background(), js, kvstore.Config{Bucket: "AX_TASKS"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// serveHealth starts the metrics listener on a free loopback port and returns its base URL, read
// from the line serveMetrics logs.
func serveHealth(t *testing.T, reg *prometheus.Registry, hc *health) string {
	t.Helper()
	var buf bytes.Buffer
	srv, err := serveMetrics("127.0.0.1:0", reg, hc, slog.New(slog.NewJSONHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	var line struct{ URL string }
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil || !strings.HasSuffix(line.URL, "/metrics") {
		t.Fatalf("metrics log line %q: %v", buf.String(), err)
	}
	return strings.TrimSuffix(line.URL, "/metrics")
}

// expect polls path until it answers code with a body containing want (within 10s).
func expect(t *testing.T, base, path string, code int, want string) {
	t.Helper()
	var got int
	var body string
	if !poll(10*time.Second, func() bool {
		got, body = get(base + path)
		return got == code && strings.Contains(body, want)
	}) {
		t.Fatalf("GET %s: %d %q, want %d with %q", path, got, body, code, want)
	}
}

// probeClient keeps no idle connections, so no goroutine outlives a test (goleak).
var probeClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

func get(url string) (int, string) {
	resp, err := probeClient.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func stopBridge(t *testing.T, b *bridge.Bridge) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Stop(ctx); err != nil {
		t.Errorf("stop: %v", err)
	}
}
