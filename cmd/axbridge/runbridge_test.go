package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/natstest"
)

// logBuffer collects a run's log output; it is written by run's goroutines and read by the test.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// bridgeArgs are the flags every run here gets besides the connection ones: debug logs as JSON,
// no metrics listener, a data dir and replica id of the test's own.
func bridgeArgs(t *testing.T, args ...string) []string {
	return append([]string{"--log-format", "json", "--log-level", "debug", "--metrics-addr", "",
		"--data-dir", t.TempDir(), "--replica-id", "sec", "--stop-timeout", "10s"}, args...)
}

// runBridge runs the binary's run with args until the test ends, waits until it is ready, and
// returns its log.
func runBridge(t *testing.T, args ...string) *logBuffer {
	t.Helper()
	logs := &logBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, bridgeArgs(t, args...), logs) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("run did not return after cancel")
		}
	})
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(logs.String(), `"msg":"ready:`) {
		select {
		case err := <-done:
			done <- err // for the cleanup
			t.Fatalf("run returned before it was ready: %v\n%s", err, logs)
		case <-deadline:
			t.Fatalf("bridge not ready\n%s", logs)
		case <-tick.C:
		}
	}
	return logs
}

// runRefused runs the binary's run with args, expects it to fail (to connect), and returns its
// log and the error.
func runRefused(t *testing.T, args ...string) (string, error) {
	t.Helper()
	logs := &logBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := run(ctx, bridgeArgs(t, args...), logs)
	if err == nil {
		t.Fatalf("run %q succeeded, want it refused\n%s", args, logs)
	}
	t.Logf("refused as expected: %v", err)
	return logs.String(), err
}

// fires schedules a task as a client connected with opts and waits until the bridge fires it.
func fires(t *testing.T, url string, opts ...nats.Option) {
	t.Helper()
	nc := natstest.Connect(t, url, opts...)
	sub, err := nc.SubscribeSync("ax.fire.sec")
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("ax.schedule.sec")
	m.Header.Set("Ax-Task-Id", "sec-1")
	m.Data = []byte("payload")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatalf("schedule: %v", err)
	}
	got, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no fire: %v", err)
	}
	if got.Header.Get("Ax-Task-Id") != "sec-1" {
		t.Fatalf("fired %v", got.Header)
	}
	if err := got.Respond(nil); err != nil {
		t.Fatal(err)
	}
}

// noSecrets fails if any of secrets appears in any of texts.
func noSecrets(t *testing.T, texts []string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if s == "" {
			t.Fatal("empty secret")
		}
		for _, text := range texts {
			if strings.Contains(text, s) {
				t.Errorf("secret %q appears in:\n%s", s, text)
			}
		}
	}
}
