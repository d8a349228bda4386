package procs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A single node starts, takes a JetStream write, is killed with SIGKILL and comes back on the
// same port and store: the write is still there; RSS reads the live process.
func TestKill9AndRestartKeepsStore(t *testing.T) {
	ctx := context.Background()
	bin, err := BuildServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c, err := Start(ctx, bin, t.TempDir(), Options{Sync: "always", Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if n, err := RSS(c.Nodes()[0].Pid()); err != nil || n <= 0 {
		t.Fatalf("RSS %d, %v", n, err)
	}
	nc, err := nats.Connect(c.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := nc.JetStream()
	if _, err := js.AddStream(&nats.StreamConfig{Name: "S", Subjects: []string{"s"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish("s", []byte("x")); err != nil {
		t.Fatal(err)
	}
	nd := c.Node("n0")
	old := nd.Pid()
	c.Kill9(nd)
	if err := c.Restart(ctx, nd); err != nil {
		t.Fatal(err)
	}
	if nd.Pid() == old {
		t.Fatal("same process after restart")
	}
	var info *nats.StreamInfo
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if !Poll(pctx, 20*time.Millisecond, func() bool {
		info, err = js.StreamInfo("S")
		return err == nil
	}) || info.State.Msgs != 1 {
		t.Fatalf("after restart: %+v, %v", info, err)
	}
}

// CPU reads this process's own CPU time from /proc, and it grows as the process computes.
func TestCPUOfOwnProcess(t *testing.T) {
	pid := os.Getpid()
	first, err := CPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	var sink uint64
	for round := 0; round < 10000; round++ { // each round ~1 ms of work; a tick is 10 ms
		for i := uint64(0); i < 1<<20; i++ {
			sink += i * i
		}
		now, err := CPU(pid)
		if err != nil {
			t.Fatal(err)
		}
		if now > first {
			return
		}
	}
	t.Fatalf("CPU stayed at %v through ~10 s of work (sink %d)", first, sink)
}

// A node started with Profile serves a CPU profile (a gzipped pprof file); one without says it
// has no profiling port.
func TestNodeCPUProfile(t *testing.T) {
	ctx := context.Background()
	bin, err := BuildServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c, err := Start(ctx, bin, t.TempDir(), Options{Nodes: 1, Profile: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	file := filepath.Join(t.TempDir(), "n0.pprof")
	if err := c.Nodes()[0].CPUProfile(ctx, time.Second, file); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("profile of %d bytes is not gzipped: % x", len(b), b[:min(len(b), 8)])
	}
	plain := &Node{Name: "plain"}
	if err := plain.CPUProfile(ctx, time.Second, file); err == nil || !strings.Contains(err.Error(), "no profiling port") {
		t.Fatalf("node without a profiling port: %v", err)
	}
}
