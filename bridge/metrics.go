package bridge

import "github.com/prometheus/client_golang/prometheus"

// metrics are the bridge's Prometheus series. Lateness is a histogram per bizType so that p99
// per bizType can be read off directly.
type metrics struct {
	scheduled    *prometheus.CounterVec
	rejected     *prometheus.CounterVec
	duplicates   *prometheus.CounterVec
	fired        *prometheus.CounterVec
	lateness     *prometheus.HistogramVec
	acks         *prometheus.CounterVec
	leaseExpired *prometheus.CounterVec
	dead         *prometheus.CounterVec
	corrupt      prometheus.Counter
	pending      prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	biz := []string{"biz_type"}
	m := &metrics{
		scheduled: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ax", Name: "tasks_scheduled_total",
			Help: "Schedule messages stored as new tasks."}, biz),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ax", Name: "schedule_rejected_total",
			Help: "Schedule messages refused, by error code."}, []string{"biz_type", "code"}),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ax", Name: "schedule_duplicates_total",
			Help: "Schedule messages that repeated an existing task."}, biz),
		fired: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ax", Name: "tasks_fired_total",
			Help: "Attempts published to ax.fire.<bizType>."}, biz),
		lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "ax", Name: "fire_lateness_seconds",
			Help:    "Time from a task's due time to its fire message being published.",
			Buckets: []float64{.001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10, 60}}, biz),
		acks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ax", Name: "acks_total",
			Help: "Consumer replies applied, by outcome (ack, nak, term, in_progress, no_responders, stale)."}, []string{"biz_type", "outcome"}),
		leaseExpired: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ax", Name: "lease_expired_total",
			Help: "Attempts that got no reply within their ack wait."}, biz),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ax", Name: "tasks_dead_total",
			Help: "Tasks that went DEAD."}, biz),
		corrupt: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ax", Name: "records_unreadable_total",
			Help: "Task records that could not be decoded."}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "ax", Name: "tasks_indexed",
			Help: "Task records this replica holds in its timing wheel (waiting, running and retained)."}),
	}
	if reg != nil {
		reg.MustRegister(m.scheduled, m.rejected, m.duplicates, m.fired, m.lateness, m.acks, m.leaseExpired, m.dead, m.corrupt, m.pending)
	}
	return m
}
