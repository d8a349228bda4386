package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/axbridge/axbridge/internal/procs"
)

// The subprocess side of the chaos, node-loss and failover tests: nats-server built once per test
// binary (next to the bridge binary, removed by TestMain), bridge processes that can be killed,
// paused and restarted, and a TCP proxy that cuts a bridge off NATS.

var (
	natsBuildOnce sync.Once
	natsBinPath   string
	natsBuildErr  error
)

// buildNATSServer builds the module's nats-server once per test binary.
func buildNATSServer(t testing.TB) string {
	t.Helper()
	natsBuildOnce.Do(func() {
		if binDir == "" { // shared with buildBridge: removed by TestMain
			if binDir, natsBuildErr = os.MkdirTemp("", "axbridge-bin"); natsBuildErr != nil {
				return
			}
		}
		natsBinPath, natsBuildErr = procs.BuildServer(context.Background(), binDir)
	})
	if natsBuildErr != nil {
		t.Fatal(natsBuildErr)
	}
	return natsBinPath
}

// startProcCluster starts n nats-server subprocesses (sync_interval: always when syncAlways),
// clustered on loopback when n > 1, stopped when the test ends. The nodes do not advertise each
// other to clients, so a client behind a proxy stays behind it.
func startProcCluster(t testing.TB, n int, syncAlways bool) *procs.Cluster {
	t.Helper()
	o := procs.Options{Nodes: n, NoAdvertise: true}
	if syncAlways {
		o.Sync = "always"
	}
	c, err := procs.Start(context.Background(), buildNATSServer(t), t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// bridgeProc is one bridge subprocess that the test kills, pauses and restarts with the same
// flags and data directory (so it keeps its replica id).
type bridgeProc struct {
	id      string
	bin     string
	args    []string
	logPath string // the process's stderr, every run appended
	// fault is held by the chaos test for the whole of a fault on this bridge (kill and restart,
	// pause and resume), so that two faults on one bridge never interleave.
	fault sync.Mutex

	mu         sync.Mutex
	cmd        *exec.Cmd
	done       chan struct{} // closed when the current run's process has exited
	paused     bool
	metricsURL string // from the current run's "metrics" log line, with --metrics-addr
}

// newBridgeProc prepares (does not start) bridge id on the NATS URL(s) url, with extra flags, its
// metrics on a port the kernel picks; the process is stopped when the test ends.
func newBridgeProc(t testing.TB, bin, id, url string, extra ...string) *bridgeProc {
	dir := t.TempDir()
	p := &bridgeProc{id: id, bin: bin, logPath: filepath.Join(dir, "bridge.log"),
		args: append([]string{"--nats-url", url, "--replica-id", id, "--data-dir", filepath.Join(dir, "data"),
			"--metrics-addr", "127.0.0.1:0", "--log-format", "json", "--log-level", "info", "--stop-timeout", "5s"}, extra...)}
	t.Cleanup(func() { p.shutdown(t) })
	return p
}

// start runs the process and waits (within) for its "ready" log line. A process that exits first
// (it could not reach NATS during an election, say) is started again until within has passed.
func (p *bridgeProc) start(within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		err := p.startOnce(time.Until(deadline))
		if err == nil || time.Until(deadline) <= 0 {
			return err
		}
	}
}

func (p *bridgeProc) startOnce(within time.Duration) error {
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, p.args...)
	procs.SetChildAttrs(cmd)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		_ = logf.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return err
	}
	done, ready := make(chan struct{}), make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.paused = cmd, done, false
	p.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		signalled := false
		for sc.Scan() {
			_, _ = io.WriteString(logf, sc.Text()+"\n")
			if url, ok := metricsLine(sc.Text()); ok {
				p.mu.Lock()
				p.metricsURL = url
				p.mu.Unlock()
			}
			if !signalled && strings.Contains(sc.Text(), `"msg":"ready`) {
				close(ready)
				signalled = true
			}
		}
		_ = cmd.Wait()
		_ = logf.Close()
		close(done)
	}()
	select {
	case <-ready:
		return nil
	case <-done:
		return fmt.Errorf("bridge %s exited before it was ready (%v); its log ends:\n%s", p.id, cmd.ProcessState, p.logTail(5))
	case <-time.After(within):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("bridge %s not ready within %v", p.id, within)
	}
}

// metricsLine is the URL in the bridge's `"msg":"metrics","url":"…"` log line.
func metricsLine(line string) (string, bool) {
	if !strings.Contains(line, `"msg":"metrics"`) {
		return "", false
	}
	_, rest, ok := strings.Cut(line, `"url":"`)
	if !ok {
		return "", false
	}
	url, _, ok := strings.Cut(rest, `"`)
	return url, ok
}

// metrics is the current run's metrics URL ("" without --metrics-addr).
func (p *bridgeProc) metrics() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.metricsURL
}

// pid is the current process's id.
func (p *bridgeProc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// kill9 kills the process with SIGKILL and waits until it has exited.
func (p *bridgeProc) kill9() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	_ = cmd.Process.Kill()
	<-done
}

// pause stops the process with SIGSTOP; resume continues it with SIGCONT.
func (p *bridgeProc) pause() error  { return p.signal(syscall.SIGSTOP, true) }
func (p *bridgeProc) resume() error { return p.signal(syscall.SIGCONT, false) }

func (p *bridgeProc) signal(sig syscall.Signal, paused bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = paused
	return p.cmd.Process.Signal(sig)
}

// shutdown ends a still running process: SIGCONT, SIGTERM, then SIGKILL after 15 s.
func (p *bridgeProc) shutdown(t testing.TB) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Logf("bridge %s did not stop within 15s of SIGTERM: killed", p.id)
		_ = cmd.Process.Kill()
		<-done
	}
}

// logTail is the last n lines of the process's log, for a failure message.
func (p *bridgeProc) logTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// logGrep is the first n lines of the process's log that contain s.
func (p *bridgeProc) logGrep(s string, n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	var out []string
	for line := range strings.Lines(string(b)) {
		if strings.Contains(line, s) && len(out) < n {
			out = append(out, strings.TrimRight(line, "\n"))
		}
	}
	return strings.Join(out, "\n")
}
