package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFlagsFromEnv(t *testing.T) {
	t.Setenv("AX_ACK_WAIT", "45s")
	t.Setenv("AX_NATS_URL", "nats://example:4222")
	o, err := parseFlags([]string{"--max-retry", "5"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.ackWait != 45*time.Second || o.natsURL != "nats://example:4222" || o.maxRetry != 5 || o.bucket != "AX_TASKS" {
		t.Errorf("options %+v", o)
	}
	t.Setenv("AX_ACK_WAIT", "soon")
	if _, err := parseFlags(nil, io.Discard); err == nil || !strings.Contains(err.Error(), "AX_ACK_WAIT") {
		t.Errorf("bad env value: err %v, want one naming AX_ACK_WAIT", err)
	}
}

// Bad settings are reported before anything starts, each with what is wrong.
func TestRunRejectsBadConfig(t *testing.T) {
	err := run(context.Background(), []string{"--max-retry", "200", "--ack-wait", "10ms", "--data-dir", t.TempDir()}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "max retry 200") || !strings.Contains(err.Error(), "ack wait 10ms") {
		t.Fatalf("err %v, want both problems named", err)
	}
	// --backoff takes what the Ax-Backoff header takes, and says which entry is wrong.
	err = run(context.Background(), []string{"--backoff", "1s,1500,oops", "--data-dir", t.TempDir()}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--backoff") || !strings.Contains(err.Error(), "entry 3") {
		t.Fatalf("err %v, want the bad backoff entry named", err)
	}
}

// The default mode as a newcomer runs it: embedded server, bridge on it, a task scheduled with a
// plain publish fires, and a cancelled context stops everything cleanly.
func TestRunEmbedded(t *testing.T) {
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	dir := t.TempDir()
	go func() {
		err := run(ctx, []string{"--listen", "127.0.0.1:0", "--data-dir", dir, "--metrics-addr", "127.0.0.1:0", "--log-format", "json", "--retention", "90m"}, pw)
		pw.Close()
		done <- err
	}()
	urls := make(chan string, 1)
	logged := make(chan struct{})
	defer func() { cancel(); <-logged }()
	go func() {
		defer close(logged)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var line struct{ Msg, URL string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "embedded NATS server running" {
				urls <- line.URL
			}
			t.Log(sc.Text())
		}
	}()
	var url string
	select {
	case url = <-urls:
	case err := <-done:
		t.Fatalf("run returned early: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("embedded server did not start")
	}
	nc := natstest.Connect(t, url, nats.RetryOnFailedConnect(true))
	fires, err := nc.SubscribeSync("ax.fire.orders")
	if err != nil {
		t.Fatal(err)
	}
	// The bridge may still be starting: the intake stream keeps the message until it is.
	m := nats.NewMsg("ax.schedule.orders")
	m.Header.Set("Ax-Task-Id", "order-42")
	m.Header.Set("Ax-Delay", "200ms")
	m.Data = []byte(`{"id":42}`)
	js, _ := nc.JetStream()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := js.PublishMsg(m); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("schedule: %v", err)
		}
		<-time.After(50 * time.Millisecond) // the stream does not exist until the bridge made it
	}
	got, err := fires.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Data) != `{"id":42}` || got.Header.Get("Ax-Task-Id") != "order-42" {
		t.Errorf("fired %q %v", got.Data, got.Header)
	}
	_ = got.Respond([]byte("+ACK"))
	// --retention is the server TTL of the final record.
	subject := "$KV.AX_TASKS." + kvstore.Key("order-42", 60) // a new bucket gets --partitions' default, 60
	var ttl string
	if !poll(10*time.Second, func() bool {
		raw, err := js.GetLastMsg("KV_AX_TASKS", subject)
		ttl = ""
		if err == nil {
			ttl = raw.Header.Get("Nats-TTL")
		}
		return ttl != ""
	}) || ttl != (90*time.Minute).String() {
		t.Errorf("final record's Nats-TTL %q, want %q from --retention", ttl, (90 * time.Minute).String())
	}
	nc.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}

// The derived replica id is a valid id made from the host name, the same on every start with the
// same data dir and different with another data dir; the flag wins.
func TestReplicaIDStable(t *testing.T) {
	t.Parallel()
	host := func() (string, error) { return "Build Box.example.com", nil }
	var warned []string
	warn := func(msg string, _ ...any) { warned = append(warned, msg) }
	dir, other := t.TempDir(), t.TempDir()
	first, err := replicaID("", dir, host, warn)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := replicaID("", dir, host, warn)
	elsewhere, _ := replicaID("", other, host, warn)
	if first != again || first == elsewhere {
		t.Errorf("ids %q, %q (same data dir), %q (another): want the first two equal and the third different", first, again, elsewhere)
	}
	if !strings.HasPrefix(first, "Build-Box-") || len(first) > 64 || strings.ContainsAny(first, ". ") {
		t.Errorf("derived id %q: want the sanitised short host name and a suffix", first)
	}
	if cfg := (bridge.Config{ReplicaID: first}); cfg.Validate() != nil {
		t.Errorf("derived id %q: %v", first, cfg.Validate())
	}
	long, _ := replicaID("", t.TempDir(), func() (string, error) { return strings.Repeat("h", 100), nil }, warn)
	if (bridge.Config{ReplicaID: long}).Validate() != nil {
		t.Errorf("id from a long host name %q is not valid", long)
	}
	if id, _ := replicaID("r-7", dir, host, warn); id != "r-7" {
		t.Errorf("flag id: got %q", id)
	}
	if len(warned) != 0 {
		t.Errorf("warnings %q", warned)
	}
}

// --user without --password is an error, not silently a token.
func TestRunUserNeedsPassword(t *testing.T) {
	err := run(context.Background(), []string{"--nats-url", "nats://127.0.0.1:1", "--user", "ann", "--data-dir", t.TempDir()}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--password") {
		t.Fatalf("err %v, want one naming --password", err)
	}
}

// poll checks cond every 10ms until it holds or within has passed.
func poll(within time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			return cond()
		case <-tick.C:
		}
	}
	return true
}
