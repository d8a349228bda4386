package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(buildOnce{m})
}

// serverBin is a nats-server built once for the tests that do not test the build itself;
// axbridgeBin is the axbridge binary, for the binary row (the test binary is not one).
var serverBin, axbridgeBin string

type buildOnce struct{ m *testing.M }

func (b buildOnce) Run() int {
	dir, err := os.MkdirTemp("", "axbench-test-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	if serverBin, err = buildServer(context.Background(), dir); err != nil {
		panic(err)
	}
	axbridgeBin = filepath.Join(dir, "axbridge")
	if out, err := exec.Command("go", "build", "-o", axbridgeBin, "github.com/axbridge/axbridge/cmd/axbridge").CombinedOutput(); err != nil {
		panic(fmt.Sprintf("build axbridge: %v\n%s", err, out))
	}
	return b.m.Run()
}

// tinyArgs run every scenario at sizes that take seconds, not minutes. Default sync keeps the
// fsync-bound intake short; TestBenchTableOutput covers sync always.
func tinyArgs() []string {
	return []string{"--nats-server", serverBin, "--axbridge", axbridgeBin, "--sync", "default",
		"--burst", "200", "--spread", "50", "--pending", "2000", "--lead", "3s", "--binary-settle", "1s",
		"--series-ticks", "3", "--limit-tasks", "300", "--bulk-tasks", "200"}
}

// The whole bench at tiny sizes against nats-server subprocesses: every row is there, with a
// figure on the side that has one, and nothing was lost or early on either side. No timing is
// asserted: the figures are whatever this machine gives.
func TestBenchTinyAllRows(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), append([]string{"--json"}, tinyArgs()...), &stdout, &stderr)
	t.Log(stderr.String())
	if code != 0 {
		t.Fatalf("exit status %d\n%s", code, stdout.String())
	}
	var rep Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, stdout.String())
	}
	if !rep.OK || len(rep.Errors) > 0 {
		t.Fatalf("report not ok: %v", rep.Errors)
	}
	got := map[string]Row{}
	for _, r := range rep.Rows {
		got[r.Key] = r
	}
	bridgeOnly := map[string]bool{"heap_steady": true, "heap_restart": true, "spread_conflicts": true, "burst_conflicts": true,
		"limit_peak": true, "limit_drain": true, "census_list": true, "census_list_one": true, "census_stats": true,
		"bulk_dry": true, "bulk_requeue": true, "bulk_rate": true,
		"binary_rss": true, "binary_heap": true, "binary_spread_p50": true, "binary_spread_p99": true, "binary_spread_max": true, "binary_rss_after": true}
	for _, d := range rowDefs {
		r, ok := got[d.key]
		if !ok {
			t.Errorf("row %s missing", d.key)
			continue
		}
		if r.Bridge == nil {
			t.Errorf("row %s: no bridge figure", d.key)
		}
		if !bridgeOnly[d.key] && (r.Native == nil || r.Ratio == nil) {
			t.Errorf("row %s: no native figure or ratio", d.key)
		}
		if r.NativeLost+r.NativeEarly+r.BridgeLost+r.BridgeEarly != 0 {
			t.Errorf("row %s: lost/early native %d/%d bridge %d/%d", d.key, r.NativeLost, r.NativeEarly, r.BridgeLost, r.BridgeEarly)
		}
	}
	// The consumer never held more than max_in_flight, and each tick of the series fired once.
	if p := got["limit_peak"]; p.Bridge == nil || *p.Bridge > limitMax || *p.Bridge < 1 {
		t.Errorf("limits: the consumer held %v at once, want 1 to %d", p.Bridge, limitMax)
	}
	if s := got["series_ticks"]; s.Bridge == nil || *s.Bridge != 3 || s.Native == nil || *s.Native != 3 {
		t.Errorf("series ticks: native %v bridge %v, want 3 each", s.Native, s.Bridge)
	}
	// The binary's resident set holds at least its heap in use.
	if rss, heap := got["binary_rss"], got["binary_heap"]; rss.Bridge == nil || heap.Bridge == nil || *heap.Bridge <= 0 || *rss.Bridge < *heap.Bridge {
		t.Errorf("binary: RSS per task %v, heap in use per task %v: want RSS ≥ heap > 0", rss.Bridge, heap.Bridge)
	}
	// Every task of a burst is stored at least once (the schedule itself) on both sides.
	if w := got["writes"]; w.Native == nil || *w.Native < 1 || w.Bridge == nil || *w.Bridge < 1 {
		t.Errorf("writes per task: native %v bridge %v, want ≥ 1 each", w.Native, w.Bridge)
	}
}

// --bridges 3: three bridges share the spread and the burst; nothing is lost or early, the claim
// conflicts rows have a figure, and the notes count the claims of all three bridges.
func TestBenchThreeBridges(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	args := []string{"--json", "--nats-server", serverBin, "--sync", "default", "--bridges", "3",
		"--only", "spread,burst", "--burst", "300", "--spread", "100", "--lead", "3s"}
	code := Main(context.Background(), args, &stdout, &stderr)
	t.Log(stderr.String())
	if code != 0 {
		t.Fatalf("exit status %d\n%s", code, stdout.String())
	}
	var rep Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, stdout.String())
	}
	if !rep.OK || rep.Settings["bridges"] != float64(3) {
		t.Fatalf("report not ok or not 3 bridges: %v %v", rep.Errors, rep.Settings)
	}
	for _, r := range rep.Rows {
		if (r.Key == "spread_conflicts" || r.Key == "burst_conflicts") && r.Bridge == nil {
			t.Errorf("row %s: no figure", r.Key)
		}
	}
	notes := strings.Join(rep.Notes, "\n")
	if !strings.Contains(notes, "3 bridge(s):") {
		t.Errorf("no claim note for 3 bridges:\n%s", notes)
	}
	t.Logf("notes:\n%s", notes)
}

// The table output (sync always, nats-server built by the bench itself) has a line per row of
// the chosen scenario, only those, and says that nothing was lost or early.
func TestBenchTableOutput(t *testing.T) {
	t.Parallel()
	var stdout bytes.Buffer
	code := Main(context.Background(), []string{"--only", "intake", "--intake", "100"}, &stdout, io.Discard)
	if code != 0 {
		t.Fatalf("exit status %d\n%s", code, stdout.String())
	}
	out := stdout.String()
	for _, want := range []string{"| metric | unit | native | bridge | bridge/native |", "intake: client publishes until the stream accepts",
		"intake: until every record is stored", "0 lost and 0 early in every row"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "spread lateness") {
		t.Errorf("--only intake printed other rows:\n%s", out)
	}
}

// lineSignal is an io.Writer that closes seen once a written line contains want.
type lineSignal struct {
	mu   sync.Mutex
	want string
	buf  bytes.Buffer
	seen chan struct{}
	once sync.Once
}

func (w *lineSignal) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// Cancelling the context (what Ctrl-C does in the command) while servers run stops the bench
// with a nonzero status and leaves no nats-server process behind. Not parallel: it counts this
// process's children, and Go runs serial tests while the parallel ones wait.
func TestBenchCancelTearsDown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &lineSignal{want: "nats-server process(es) up", seen: make(chan struct{})}
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"--nats-server", serverBin, "--only", "pending", "--pending", "1000000"}, io.Discard, w)
	}()
	select {
	case <-w.seen:
	case <-time.After(60 * time.Second):
		t.Fatal("no server started within 60s")
	}
	cancel()
	select {
	case code := <-done:
		if code == 0 {
			t.Fatal("cancelled bench exited 0")
		}
	case <-time.After(60 * time.Second):
		t.Fatal("bench did not stop within 60s of cancel")
	}
	if kids := childProcesses(t); len(kids) > 0 {
		t.Fatalf("child processes left after cancel: %v", kids)
	}
}

// childProcesses lists the commands of this process's live children (Linux /proc).
func childProcesses(t *testing.T) []string {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil || len(stats) == 0 {
		t.Fatalf("cannot list processes (/proc): %v", err)
	}
	me := strconv.Itoa(os.Getpid())
	var kids []string
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) >= 2 && fields[1] == me && fields[0] != "Z" {
			kids = append(kids, s[:i+1])
		}
	}
	return kids
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args    []string
		only    []string
		wantErr string
	}{
		{args: nil, only: scenarios},
		{args: []string{"--only", "writes,heap"}, only: []string{"burst", "pending"}},
		{args: []string{"--only", "restart, intake"}, only: []string{"intake", "pending"}},
		{args: []string{"--only", "nope"}, wantErr: `--only "nope"`},
		{args: []string{"--sync", "sometimes"}, wantErr: `--sync "sometimes"`},
		{args: []string{"--burst", "0"}, wantErr: "--burst 0"},
		{args: []string{"--bridges", "0"}, wantErr: "--bridges 0"},
		{args: []string{"--log-level", "loud"}, wantErr: `--log-level "loud"`},
		{args: []string{"extra"}, wantErr: "unexpected arguments"},
	} {
		o, err := parseFlags(tc.args, io.Discard)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: err %v, want %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if strings.Join(o.only, ",") != strings.Join(tc.only, ",") {
			t.Errorf("%q: scenarios %v, want %v", tc.args, o.only, tc.only)
		}
	}
	if o, _ := parseFlags([]string{"--burst", "7"}, io.Discard); o.intake != 7 {
		t.Errorf("--intake defaults to %d, want --burst's 7", o.intake)
	}
}

func TestTaskPayloadSize(t *testing.T) {
	for _, n := range []int{0, 1, len(basePayload), len(basePayload) + 1, len(basePayload) + 9, len(basePayload) + 10, 1024, 4096} {
		p := taskPayload(n)
		if want := max(n, len(basePayload)); len(p) != want {
			t.Errorf("taskPayload(%d): %d bytes, want %d", n, len(p), want)
		}
		if !json.Valid(p) {
			t.Errorf("taskPayload(%d) = %q: not JSON", n, p)
		}
	}
}
