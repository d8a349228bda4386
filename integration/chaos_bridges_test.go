package integration

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/axbridge/axbridge/internal/scrape"
)

// What a fault run checks of the bridge processes themselves once the tasks have settled: the
// reconciler repaired nothing (a repair means the watch or the loop lost a task, which the
// README calls a bug; counted over every run of each process from its log, and over the current
// run from its metrics), and no process reported a data race, a panic or a fatal error.

// repairLine is what the reconciler logs for each repair (bridge/reconcile.go).
const repairLine = "reconciler: task was not indexed in time"

// badLines are log lines that fail a fault run wherever they appear: the race detector's report
// (the subprocesses are built with -race when the test binary is), a panic, a runtime fatal error.
var badLines = []string{"WARNING: DATA RACE", "panic: ", "fatal error: "}

// checkBridges fails the test on any reconciler repair or bad log line of the bridges.
func checkBridges(t testing.TB, bridges []*bridgeProc) {
	t.Helper()
	for _, b := range bridges {
		logged, bad := b.logScan()
		if logged > 0 {
			t.Errorf("bridge %s: the reconciler repaired %d tasks (a lost watch event or index entry):\n%s", b.id, logged, b.logGrep(repairLine, 5))
		}
		for _, s := range bad {
			t.Errorf("bridge %s: %s", b.id, s)
		}
		if !b.running() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		n, err := scrape.Sum(ctx, b.metrics(), "ax_reconcile_repairs_total")
		cancel()
		switch {
		case err != nil:
			t.Errorf("bridge %s: %v", b.id, err)
		case n != 0:
			t.Errorf("bridge %s: ax_reconcile_repairs_total %v, want 0", b.id, n)
		}
	}
}

// logScan counts the reconciler's repair lines in every run's log and returns each bad line with
// the lines that follow it.
func (p *bridgeProc) logScan() (repairs int, bad []string) {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return 0, []string{err.Error()}
	}
	lines := strings.Split(string(data), "\n")
	for i, line := range lines {
		if strings.Contains(line, repairLine) {
			repairs++
		}
		for _, s := range badLines {
			if strings.Contains(line, s) && !strings.HasPrefix(line, "{") { // a JSON log line is the bridge's own
				if len(bad) < 3 { // with the lines that follow: the race report's stacks
					bad = append(bad, strings.Join(lines[i:min(len(lines), i+40)], "\n"))
				} else if len(bad) == 3 {
					bad = append(bad, "and more")
				}
			}
		}
	}
	return repairs, bad
}

// running reports whether the current run's process is alive.
func (p *bridgeProc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}
