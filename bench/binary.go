package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/procs"
	"github.com/axbridge/axbridge/internal/scrape"
)

// binaryProc is the axbridge binary running as a subprocess of the bench, on the bench's servers.
type binaryProc struct {
	cmd     *exec.Cmd
	metrics string // its /metrics URL
	exited  chan struct{}
}

// startBinary runs --axbridge (default: this executable, the axbridge binary whose subcommand
// bench is) as the bridge,
// with --binary-env added to its environment, and waits (a minute at most) until it is ready.
func (r *runner) startBinary(ctx context.Context, srv *serverSet) (*binaryProc, error) {
	exe := r.o.axbridge
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	ports, err := procs.FreePorts(1)
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	logf, err := os.Create(filepath.Join(r.tmp, "axbridge-binary.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "--nats-url", srv.url(), "--replicas", strconv.Itoa(srv.replicas()),
		"--metrics-addr", addr, "--log-level", "warn", "--replica-id", "bench-binary",
		"--write-batch", strconv.Itoa(r.o.writeBatch))
	cmd.Env = append(os.Environ(), r.o.binaryEnv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	procs.SetChildAttrs(cmd)
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start the axbridge binary: %w", err)
	}
	p := &binaryProc{cmd: cmd, metrics: "http://" + addr + "/metrics", exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(p.exited) }()
	ready := "http://" + addr + "/readyz"
	gone := false
	err = r.waitFor(ctx, "binary ready", time.Minute, func() bool {
		select {
		case <-p.exited:
			gone = true
			return true
		default:
		}
		resp, err := http.Get(ready)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, func() string { return "waiting for " + ready })
	if err == nil && gone {
		err = fmt.Errorf("%s exited before it was ready", exe)
	}
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("%w (its log: %s)", err, logf.Name())
	}
	return p, nil
}

// stop ends the process with SIGTERM (SIGKILL after 30 s) and waits for it.
func (p *binaryProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

func (p *binaryProc) rss() (int64, error) { return procs.RSS(p.cmd.Process.Pid) }

// bridgeBinary measures the axbridge binary as operators run it: its resident set with
// --pending far-future tasks taken in through intake (no restart), and the spread's lateness
// with them pending.
func (r *runner) bridgeBinary(ctx context.Context, srv *serverSet, x *result) error {
	p, err := r.startBinary(ctx, srv)
	if err != nil {
		return err
	}
	defer p.stop()
	nc, err := connect(srv.url(), "bench-client")
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return err
	}
	s := &bridgeSide{nc: nc, js: js, srv: srv}
	defer s.close()
	total := r.o.pending
	if err := publishAll(ctx, r.p, "publish", nc, total, func(i int) *nats.Msg {
		return bridgeSchedule(r.payload, "far", i, func(h nats.Header) { h.Set(bridge.HeaderDelay, strconv.Itoa(3600_000+i)) })
	}); err != nil {
		return err
	}
	if err := r.waitStored(ctx, s, 30*time.Minute); err != nil {
		return err
	}
	var indexed float64
	if err := r.waitFor(ctx, "indexed", 10*time.Minute, func() bool {
		indexed, _ = scrape.Sum(ctx, p.metrics, "ax_tasks_indexed")
		return indexed >= float64(total)
	}, func() string { return fmt.Sprintf("%.0f/%d indexed", indexed, total) }); err != nil {
		return err
	}
	r.p.say("indexed; the resident set in %v", r.o.binarySettle)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(r.o.binarySettle):
	}
	if err := r.binaryMemory(ctx, p, total, x, "binary_rss", "binary_heap"); err != nil {
		return err
	}
	if err := r.binarySpread(ctx, s, x); err != nil {
		return err
	}
	return r.binaryMemory(ctx, p, total, x, "binary_rss_after", "")
}

// binaryMemory sets rssKey to the process's resident set per pending task and heapKey (if not
// empty) to its heap in use per task, from its go_memstats_heap_inuse_bytes.
func (r *runner) binaryMemory(ctx context.Context, p *binaryProc, total int, x *result, rssKey, heapKey string) error {
	rss, err := p.rss()
	if err != nil {
		return err
	}
	x.vals[rssKey] = float64(rss) / float64(total)
	if heapKey == "" {
		return nil
	}
	heap, err := scrape.Sum(ctx, p.metrics, "go_memstats_heap_inuse_bytes")
	if err != nil {
		return err
	}
	x.vals[heapKey] = heap / float64(total)
	x.notes = append(x.notes, fmt.Sprintf("binary: RSS %d MiB, heap in use %.0f MiB with %d pending", rss>>20, heap/(1<<20), total))
	return nil
}

// binarySpread is the spread row's lateness against the binary (--spread tasks over 0.5–4 s).
func (r *runner) binarySpread(ctx context.Context, s *bridgeSide, x *result) error {
	total := r.o.spread
	var mu sync.Mutex
	meant := make(map[string]time.Time, total)
	f := newFires()
	if err := s.consume("spread", f, func(id string) time.Time {
		mu.Lock()
		defer mu.Unlock()
		return meant[id]
	}, nil, nil); err != nil {
		return err
	}
	if err := publishAll(ctx, r.p, "publish spread", s.nc, total, func(i int) *nats.Msg {
		d := spreadDelay(i, total)
		m := bridgeSchedule(r.payload, "spread", i, func(h nats.Header) { h.Set(bridge.HeaderDelay, strconv.FormatInt(d.Milliseconds(), 10)) })
		mu.Lock()
		meant[m.Header.Get(bridge.HeaderTaskID)] = time.Now().Add(d)
		mu.Unlock()
		return m
	}); err != nil {
		return err
	}
	err := r.waitFor(ctx, "spread fires", 4*time.Second+2*time.Minute, func() bool { return f.distinct() >= total },
		func() string { return fmt.Sprintf("%d/%d fired", f.distinct(), total) })
	x.lost, x.early = f.check(total)
	if err != nil {
		return err
	}
	if p50, p99, pmax, ok := percentiles(f.late); ok {
		x.vals["binary_spread_p50"], x.vals["binary_spread_p99"], x.vals["binary_spread_max"] = p50, p99, pmax
	}
	return nil
}

// parseEnv splits --binary-env's comma-separated NAME=value pairs.
func parseEnv(v string) ([]string, error) {
	if v == "" {
		return nil, nil
	}
	var env []string
	for kv := range strings.SplitSeq(v, ",") {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return nil, fmt.Errorf("--binary-env %q: want NAME=value[,NAME=value...]", kv)
		}
		env = append(env, kv)
	}
	return env, nil
}
