package bridge

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/axbridge/axbridge/internal/retry"
)

// outageLog reports store failures once per change of state instead of once per task: the first
// failure is a Warn with its error, a failure that goes on is summed up once a minute, and the end
// of the outage, once no step has failed for outageQuiet (tasks retry every retry.Step.First, so
// an outage that goes on keeps failing), is an Info with the count. Reads may work while writes
// fail, so one success does not end it. Workers share one, the loop ticks it; it is safe for
// concurrent use and costs one atomic load while the store is healthy.
type outageLog struct {
	log     *slog.Logger
	failing atomic.Bool

	mu       sync.Mutex
	since    time.Time // start of the outage
	lastLog  time.Time
	lastFail time.Time
	failures int // failed calls since the outage began
}

// outageSummaryEvery is how often an outage that goes on is logged again.
const outageSummaryEvery = time.Minute

// outageQuiet is how long no step may fail before an outage counts as over.
var outageQuiet = 3 * retry.Step.First

func newOutageLog(log *slog.Logger) *outageLog { return &outageLog{log: log} }

// failed records a failed store call of a task step.
func (o *outageLog) failed(step, id string, err error) {
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failures++
	o.lastFail = now
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

// ok records a successful store call, and tick the passing of time (the loop calls it once a
// second): either ends an outage once no step has failed for outageQuiet.
func (o *outageLog) ok() { o.tick() }

func (o *outageLog) tick() {
	if !o.failing.Load() {
		return
	}
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.failing.Load() || now.Sub(o.lastFail) < outageQuiet {
		return
	}
	o.failing.Store(false)
	o.log.Info("task store calls succeed again", "failures", o.failures,
		"after", o.lastFail.Sub(o.since).Round(time.Millisecond))
}
