package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// The end-to-end benchmarks: see README.md for the command and the figures.
// Each runs its scenario once per b.N iteration; use -benchtime 1x.

// benchTasks is the size of the intake and fire+ack runs.
var benchTasks = envInt("AX_BENCH_TASKS", 50_000)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// benchPayload is the body of every benchmark task.
var benchPayload = []byte(`{"order":42,"note":"close if unpaid"}`)

// publishMsgs publishes the n messages msg(i) through JetStream with pipelined async publishes,
// waits for every stream ack and fails the benchmark if the stream refused any.
func publishMsgs(b *testing.B, nc *nats.Conn, n int, msg func(i int) *nats.Msg) {
	b.Helper()
	var refused atomic.Int64
	var firstErr atomic.Value
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
			if refused.Add(1) == 1 {
				firstErr.Store(err)
			}
		}))
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		// A generous stall wait: on a loaded machine the default 200ms fails the run although the
		// server is merely slow to ack.
		if _, err := js.PublishMsgAsync(msg(i), jetstream.WithStallWait(time.Minute)); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(2 * time.Minute):
		b.Fatal("publishes not acked within 2m")
	}
	if n := refused.Load(); n > 0 {
		b.Fatalf("%d publishes refused, first: %v", n, firstErr.Load())
	}
}

// publishAll publishes n schedule messages for biz; hdr sets each one's headers.
func publishAll(b *testing.B, nc *nats.Conn, biz string, n int, hdr func(i int, h nats.Header)) {
	b.Helper()
	publishMsgs(b, nc, n, func(i int) *nats.Msg {
		m := nats.NewMsg(bridge.SchedulePrefix + biz)
		m.Data = benchPayload
		hdr(i, m.Header)
		return m
	})
}

// lateness collects receive time minus due time of fired tasks, from any goroutine.
type lateness struct {
	mu    sync.Mutex
	late  []time.Duration
	early int
}

func (l *lateness) add(due, now time.Time) {
	l.mu.Lock()
	l.late = append(l.late, now.Sub(due))
	if now.Before(due) {
		l.early++
	}
	l.mu.Unlock()
}

func (l *lateness) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.late)
}

// report reports p50, p99 and max lateness in ms and the count of early fires.
func (l *lateness) report(b *testing.B) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.late) == 0 {
		b.Fatal("nothing fired")
	}
	slices.Sort(l.late)
	b.ReportMetric(ms(l.late[len(l.late)/2]), "p50-ms")
	b.ReportMetric(ms(l.late[len(l.late)*99/100]), "p99-ms")
	b.ReportMetric(ms(l.late[len(l.late)-1]), "max-ms")
	b.ReportMetric(float64(l.early), "early")
}

// waitIntakeDrained waits until the intake stream is empty: every schedule message is stored as
// a task (the bridge acks a message only once its record is durable).
func (e *env) waitIntakeDrained() {
	e.t.Helper()
	if !checkFor(5*time.Minute, func() bool { return e.streamEmpty("AX_SCHEDULE") }) {
		e.t.Fatal("intake stream not drained within 5m")
	}
}

// metricSum adds up the samples of one metric family in reg whose labels include match.
func metricSum(reg *prometheus.Registry, name string, match map[string]string) float64 {
	mfs, _ := reg.Gather()
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for k, v := range match {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// BenchmarkIntake: schedule messages published as fast as a pipelined publisher can, until every
// one is a durable task record. Reports tasks/s.
func BenchmarkIntake(b *testing.B) {
	for range b.N {
		e := newEnv(b)
		e.startBridge(bridge.Config{})
		start := time.Now()
		publishAll(b, e.nc, "intake", benchTasks, func(i int, h nats.Header) {
			h.Set(bridge.HeaderTaskID, "in-"+strconv.Itoa(i))
			h.Set(bridge.HeaderDelay, "1h")
		})
		e.waitIntakeDrained()
		b.ReportMetric(float64(benchTasks)/time.Since(start).Seconds(), "tasks/s")
	}
}

// BenchmarkFireAck: benchTasks tasks due at one instant, a consumer that acks each; from the due
// time until every ack is applied (record SUCCESS). Reports tasks/s.
func BenchmarkFireAck(b *testing.B) {
	for range b.N {
		e := newEnv(b)
		reg := prometheus.NewRegistry()
		e.startBridge(bridge.Config{Registerer: reg, Workers: envInt("AX_BENCH_WORKERS", 0), AckWorkers: envInt("AX_BENCH_WORKERS", 0)})
		var received atomic.Int64
		var lastFire atomic.Int64
		sub, err := e.nc.Subscribe("ax.fire.burst", func(m *nats.Msg) {
			_ = m.Ack()
			received.Add(1)
			lastFire.Store(time.Now().UnixNano())
		})
		if err != nil {
			b.Fatal(err)
		}
		_ = sub.SetPendingLimits(-1, -1)
		due := time.Now().Add(30 * time.Second).Truncate(time.Millisecond)
		dueStr := strconv.FormatInt(due.UnixMilli(), 10)
		publishAll(b, e.nc, "burst", benchTasks, func(i int, h nats.Header) {
			h.Set(bridge.HeaderTaskID, "burst-"+strconv.Itoa(i))
			h.Set(bridge.HeaderDeliverAt, dueStr)
		})
		e.waitIntakeDrained()
		if time.Now().After(due) {
			b.Fatal("intake took longer than the lead time; raise it")
		}
		if f := os.Getenv("AX_BENCH_CPUPROFILE"); f != "" { // profile the burst alone
			<-time.After(time.Until(due))
			stop := startCPUProfile(b, f)
			defer stop()
		}
		acked := func() bool {
			return metricSum(reg, "ax_acks_total", map[string]string{"outcome": "ack"}) >= float64(benchTasks)
		}
		if !checkFor(time.Until(due)+5*time.Minute, acked) {
			b.Fatal("not every task acked")
		}
		took := time.Since(due)
		b.ReportMetric(float64(benchTasks)/took.Seconds(), "tasks/s")
		b.ReportMetric(float64(benchTasks)/time.Unix(0, lastFire.Load()).Sub(due).Seconds(), "fired/s")
		_ = sub.Unsubscribe()
	}
}

// BenchmarkLateness: 100k far-future tasks pending, then 10k tasks due over 5s; lateness is the
// consumer's receive time minus Ax-Due-At. Reports p50, p99, max (ms) and early fires.
func BenchmarkLateness(b *testing.B) {
	pending, firing := envInt("AX_BENCH_PENDING", 100_000), envInt("AX_BENCH_FIRING", 10_000)
	for range b.N {
		e := newEnv(b)
		e.startBridge(bridge.Config{})
		publishAll(b, e.nc, "far", pending, func(i int, h nats.Header) {
			h.Set(bridge.HeaderTaskID, "far-"+strconv.Itoa(i))
			h.Set(bridge.HeaderDelay, strconv.Itoa(3600_000+i))
		})
		e.waitIntakeDrained()

		var late lateness
		sub, err := e.nc.Subscribe("ax.fire.soon", func(m *nats.Msg) {
			now := time.Now()
			d, _ := time.Parse(time.RFC3339Nano, m.Header.Get(bridge.HeaderDueAt))
			late.add(d, now)
			_ = m.Ack()
		})
		if err != nil {
			b.Fatal(err)
		}
		_ = sub.SetPendingLimits(-1, -1)
		start := time.Now().Add(10 * time.Second)
		publishAll(b, e.nc, "soon", firing, func(i int, h nats.Header) {
			at := start.Add(time.Duration(i) * 5 * time.Second / time.Duration(firing))
			h.Set(bridge.HeaderTaskID, "soon-"+strconv.Itoa(i))
			h.Set(bridge.HeaderDeliverAt, at.UTC().Format(time.RFC3339Nano))
		})
		if !checkFor(time.Until(start)+time.Minute, func() bool { return late.count() >= firing }) {
			b.Fatalf("%d of %d tasks fired", late.count(), firing)
		}
		_ = sub.Unsubscribe()
		late.report(b)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkHeapPerTask: the bridge's heap per pending far-future task. The NATS server runs as a
// separate process here so that its memory is not counted.
func BenchmarkHeapPerTask(b *testing.B) {
	n := envInt("AX_BENCH_PENDING", 100_000)
	url := startServerProcess(b)
	for range b.N {
		nc := natstest.Connect(b, url)
		js, _ := jetstream.New(nc)
		store, err := kvstore.OpenJetStore(context.Background(), js, kvstore.Config{Bucket: "HEAP" + strconv.Itoa(b.N)})
		if err != nil {
			b.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		br, err := bridge.New(nc, store, bridge.Config{Registerer: reg, Stream: "HEAPS", Consumer: "heap"})
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		if err := br.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		publishAll(b, nc, "heap", n, func(i int, h nats.Header) {
			h.Set(bridge.HeaderTaskID, "heap-"+strconv.Itoa(i))
			h.Set(bridge.HeaderDelay, strconv.Itoa(3600_000+i))
		})
		if !checkFor(5*time.Minute, func() bool { return metricSum(reg, "ax_tasks_indexed", nil) >= float64(n) }) {
			b.Fatal("tasks not indexed")
		}
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m1)
		b.ReportMetric(float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/float64(n), "B/task")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = br.Stop(ctx)
		cancel()
		nc.Close()
	}
}

// startServerProcess builds nats-server from the module cache and runs it as a child process.
func startServerProcess(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	bin := filepath.Join(dir, "nats-server")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		b.Fatalf("build nats-server: %v\n%s", err, out)
	}
	port := 14222 + os.Getpid()%1000
	cmd := exec.Command(bin, "-js", "-sd", filepath.Join(dir, "js"), "-a", "127.0.0.1", "-p", strconv.Itoa(port))
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	if !checkFor(20*time.Second, func() bool {
		nc, err := nats.Connect(url)
		if err == nil {
			nc.Close()
		}
		return err == nil
	}) {
		b.Fatal("nats-server process did not start")
	}
	return url
}

// startCPUProfile writes a CPU profile to path until the returned func is called.
func startCPUProfile(b *testing.B, path string) func() {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }
}
