package bridge

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// outageLog reports store failures once per change of state instead of once per task: the first
// failure is a Warn with its error, a failure that goes on is summed up once a minute, and the
// first success after failures is an Info with the count. Workers share one; it is safe for
// concurrent use and costs one atomic load on the success path.
type outageLog struct {
	log     *slog.Logger
	failing atomic.Bool

	mu       sync.Mutex
	since    time.Time // start of the outage
	lastLog  time.Time
	failures int // failed calls since the outage began
}

// outageSummaryEvery is how often an outage that goes on is logged again.
const outageSummaryEvery = time.Minute

func newOutageLog(log *slog.Logger) *outageLog { return &outageLog{log: log} }

// failed records a failed store call of a task step.
func (o *outageLog) failed(step, id string, err error) {
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failures++
	switch {
	case !o.failing.Load():
		o.failing.Store(true)
		o.since, o.lastLog, o.failures = now, now, 1
		o.log.Warn("task store calls failing; the tasks will be retried", "step", step, "task_id", id, "err", err)
	case now.Sub(o.lastLog) >= outageSummaryEvery:
		o.lastLog = now
		o.log.Warn("task store calls still failing", "failures", o.failures, "for", now.Sub(o.since).Round(time.Second),
			"step", step, "err", err)
	}
}

// ok records a successful store call; it ends an outage.
func (o *outageLog) ok() {
	if !o.failing.Load() {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.failing.Load() {
		return
	}
	o.failing.Store(false)
	o.log.Info("task store calls succeed again", "failures", o.failures, "after", time.Since(o.since).Round(time.Millisecond))
}
