package bridge

import "github.com/prometheus/client_golang/prometheus"

// loopMetrics are the scheduling loop's series: what is overdue, how the task watch is doing,
// what the reconciler had to repair, and the loop's bounded queues.
type loopMetrics struct {
	overdue       prometheus.Gauge
	pausedDue     prometheus.Gauge
	oldestOverdue prometheus.Gauge
	watchRestarts prometheus.Counter
	watchUp       prometheus.Gauge
	repairs       *prometheus.CounterVec
	clockSteps    *prometheus.CounterVec
	queued        prometheus.Gauge
	preRead       prometheus.Gauge
	preReadBytes  prometheus.Gauge
	claimAhead    prometheus.Gauge
	heldFires     prometheus.Counter
	claimsOut     prometheus.Gauge
	claimBudget   prometheus.Gauge

	// observe, when set (by tests in this package), sees the loop's bounded state after every turn.
	observe func(loopStats)
}

// loopStats is the loop's state after one turn, for observe.
type loopStats struct {
	queued       int // jobs taken from the index that no worker has taken yet
	preRead      int // records held with their payload
	preReadBytes int
	indexed      int
	held         int // claims landed ahead of their due time, waiting in the loop to be published
}

func newLoopMetrics() *loopMetrics {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "ax", Name: name, Help: help})
	}
	m := &loopMetrics{
		overdue: gauge("tasks_overdue",
			"WAITING tasks this replica indexes whose due time has passed and that no worker has claimed yet."),
		pausedDue: gauge("tasks_overdue_paused",
			"WAITING tasks of paused bizTypes this replica indexes whose due time has passed (not in ax_tasks_overdue)."),
		oldestOverdue: gauge("oldest_overdue_seconds",
			"How long the most overdue WAITING task of this replica has been due (0 when none is)."),
		watchRestarts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ax", Name: "watch_restarts_total",
			Help: "Times the task watch ended and was started again."}),
		watchUp: gauge("watch_up", "1 while the task watch runs, 0 while it is being started again."),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ax", Name: "reconcile_repairs_total",
			Help: "Tasks the reconciler found missing from the index or indexed too late, by record status " +
				"(waiting, running). Anything above zero is a bug to chase."}, []string{"kind"}),
		clockSteps: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ax", Name: "clock_steps_total",
			Help: "Steps of the wall clock against the monotonic clock, by direction (forward, backward)."}, []string{"direction"}),
		queued:       gauge("loop_queued_jobs", "Due steps taken from the index and waiting for a worker (bounded)."),
		preRead:      gauge("preread_tasks", "Records held in memory with their payload ahead of their due time (bounded)."),
		preReadBytes: gauge("preread_bytes", "Payload and header bytes of the records held ahead of their due time (bounded)."),
		claimAhead: gauge("claim_ahead_seconds",
			"How long before its due time a task is claimed now: a few times the recent claim latency, within the configured bound."),
		heldFires: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ax", Name: "fires_claimed_ahead_total",
			Help: "Fires whose claim landed before the task was due, published by the loop at the due time; the others " +
				"go out from the claim's completion."}),
		claimsOut: gauge("claims_out", "Fires taken from the index and not yet out: waiting for a worker, "+
			"or claimed and not yet seen to land (claims held for their due time do not count)."),
		claimBudget: gauge("claim_budget", "How many fires may be out now: less while the task watch loads "+
			"partitions, the connection is down, or fires and claims wait too long."),
	}
	// Both kinds show from the start, at 0: an alert on the series, and a test's scrape, then see
	// a repair as a change rather than as a series appearing.
	m.repairs.WithLabelValues("waiting")
	m.repairs.WithLabelValues("running")
	return m
}

func (m *loopMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.overdue, m.pausedDue, m.oldestOverdue, m.watchRestarts, m.watchUp, m.repairs, m.clockSteps,
		m.queued, m.preRead, m.preReadBytes, m.claimAhead, m.heldFires, m.claimsOut, m.claimBudget}
}
