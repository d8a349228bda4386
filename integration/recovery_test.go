package integration

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/kvstore"
)

// fireLog records every fire of every task, acking each one.
type fireLog struct {
	mu       sync.Mutex
	attempts map[string][]int
}

func (e *env) ackAndLog(subject string) *fireLog {
	l := &fireLog{attempts: map[string][]int{}}
	sub, err := e.nc.QueueSubscribe(subject, "workers", func(m *nats.Msg) {
		a, _ := strconv.Atoi(m.Header.Get(bridge.HeaderAttempt))
		l.mu.Lock()
		l.attempts[m.Header.Get(bridge.HeaderTaskID)] = append(l.attempts[m.Header.Get(bridge.HeaderTaskID)], a)
		l.mu.Unlock()
		_ = m.Ack()
	})
	if err != nil {
		e.t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	_ = e.nc.Flush()
	return l
}

func (l *fireLog) fired() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.attempts)
}

// check asserts every task fired, and any repeat carried a higher attempt than the one before.
func (l *fireLog) check(t *testing.T, ids []string) (repeats int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		as := l.attempts[id]
		if len(as) == 0 {
			t.Errorf("task %s never fired", id)
			continue
		}
		for i := 1; i < len(as); i++ {
			if as[i] <= as[i-1] {
				t.Errorf("task %s fired attempts %v: a repeat without a higher attempt", id, as)
			}
		}
		repeats += len(as) - 1
	}
	return repeats
}

func (e *env) scheduleSpread(biz string, n int, spread time.Duration, extra ...string) []string {
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%d", biz, i)
		delay := time.Duration(i) * spread / time.Duration(n)
		e.schedule(biz, "x", append([]string{bridge.HeaderTaskID, ids[i], bridge.HeaderDelay, delay.String()}, extra...)...)
	}
	return ids
}

func (e *env) waitAll(ids []string, status kvstore.Status, within time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for _, id := range ids {
		e.waitStatus(id, status, max(time.Until(deadline), time.Second))
	}
}

// Two bridges on one bucket and stream: every task fires once (no lease expired, so no repeats).
func TestTwoBridgesFireOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{ReplicaID: "one"})
	e.startBridge(bridge.Config{ReplicaID: "two"})
	log := e.ackAndLog("ax.fire.twin")
	ids := e.scheduleSpread("twin", 300, 2*time.Second)
	e.waitAll(ids, kvstore.StatusSuccess, 20*time.Second)
	if repeats := log.check(t, ids); repeats != 0 {
		t.Errorf("%d repeated fires with two bridges and prompt acks", repeats)
	}
}

// The NATS server restarts on the same store dir while tasks are pending: every task fires.
func TestNATSRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{})
	log := e.ackAndLog("ax.fire.restart")
	ids := e.scheduleSpread("restart", 200, 3*time.Second, bridge.HeaderAckWait, "2s", bridge.HeaderBackoff, "100ms")
	if !checkFor(10*time.Second, func() bool { return log.fired() > 20 }) {
		t.Fatal("nothing fired before the restart")
	}
	e.srv.Restart(t)
	e.waitAll(ids, kvstore.StatusSuccess, 60*time.Second)
	repeats := log.check(t, ids)
	t.Logf("%d tasks, %d repeated fires after the restart", len(ids), repeats)
}

// The bridge is a real process killed with SIGKILL while tasks are pending and in flight, then
// started again: every task fires, repeats only with a higher attempt.
func TestBridgeKill9(t *testing.T) {
	t.Parallel()
	bin := buildBridge(t)
	e := newEnv(t)
	log := e.ackAndLog("ax.fire.crash")
	dir := t.TempDir() // both processes: the restarted one keeps the replica id kept there
	p := startProcess(t, bin, e.srv.ClientURL(), dir)
	ids := e.scheduleSpread("crash", 300, 3*time.Second, bridge.HeaderAckWait, "2s", bridge.HeaderBackoff, "100ms")
	if !checkFor(20*time.Second, func() bool { return log.fired() > 50 }) {
		t.Fatal("nothing fired before the kill")
	}
	p.kill9(t)
	before := log.fired()
	p2 := startProcess(t, bin, e.srv.ClientURL(), dir)
	e.waitAll(ids, kvstore.StatusSuccess, 60*time.Second)
	repeats := log.check(t, ids)
	t.Logf("%d tasks, %d fired before kill -9, %d repeated fires", len(ids), before, repeats)
	p2.stop(t)
}

var (
	buildOnce sync.Once
	binDir    string // removed by TestMain
	binPath   string
	buildErr  error
)

// buildBridge builds cmd/axbridge once per test binary, with the race detector when this binary
// has it (go test -race): a data race in a subprocess is then reported in its log, which the fault
// runs check (raceReports).
func buildBridge(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "axbridge-bin")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "axbridge")
		args := []string{"build", "-o", binPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, "../cmd/axbridge")...).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startProcess runs the bridge binary against url, with dataDir as its --data-dir (where it keeps
// its replica id) and any further flags, and waits for its "ready" log line.
func startProcess(t *testing.T, bin, url, dataDir string, flags ...string) *process {
	t.Helper()
	args := append([]string{"--nats-url", url, "--data-dir", dataDir, "--metrics-addr", "", "--log-format", "json", "--log-level", "info"}, flags...)
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		signalled := false
		for sc.Scan() {
			if !signalled && strings.Contains(sc.Text(), `"msg":"ready`) {
				close(ready)
				signalled = true
			}
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
			return
		default:
		}
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	select {
	case <-ready:
	case <-p.done:
		t.Fatal("bridge process exited before it was ready")
	case <-time.After(30 * time.Second):
		t.Fatal("bridge process not ready within 30s")
	}
	return p
}

// stop sends SIGTERM and expects a graceful exit with status 0.
func (p *process) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		t.Fatal("bridge did not stop within 15s of SIGTERM")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit status %d after SIGTERM, want 0", code)
	}
}

func (p *process) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	<-p.done
}
