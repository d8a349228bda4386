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
	alarmActive  *prometheus.GaugeVec
	acks         *prometheus.CounterVec
	leaseExpired *prometheus.CounterVec
	givenBack    *prometheus.CounterVec
	fromLog      *prometheus.CounterVec
	dead         *prometheus.CounterVec
	corrupt      prometheus.Counter
	pending      prometheus.Gauge
	ack          *ackMetrics // metrics_ack.go: store errors of claims and acks, dropped acks
	loop         *loopMetrics
	intake       *intakeMetrics // metrics_intake.go
	members      *memberMetrics // metrics_members.go
}

func newMetrics(reg prometheus.Registerer) *metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ax", Name: name, Help: help}, labels)
	}
	m := &metrics{
		scheduled:  counter("tasks_scheduled_total", "Schedule messages stored as new tasks.", "biz_type"),
		rejected:   counter("schedule_rejected_total", "Schedule messages refused, by error code.", "biz_type", "code"),
		duplicates: counter("schedule_duplicates_total", "Schedule messages that repeated an existing task.", "biz_type"),
		fired:      counter("tasks_fired_total", "Attempts published to ax.fire.<bizType>.", "biz_type"),
		alarmActive: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "ax", Name: "alarm_active",
			Help: "1 while the bizType's alarm fires (ax.alarm.<bizType>; alarm lateness: p99 over its threshold, overdue: a task waiting past due longer than --alarm-overdue), 0 once resolved."},
			[]string{"biz_type", "alarm"}),
		lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "ax", Name: "fire_lateness_seconds",
			Help:    "Time from a task's due time to its fire message being published.",
			Buckets: []float64{.001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10, 60}}, []string{"biz_type"}),
		acks: counter("acks_total",
			"Consumer replies applied, by outcome (ack, nak, term, in_progress, no_responders, stale).", "biz_type", "outcome"),
		leaseExpired: counter("lease_expired_total", "Attempts that got no reply within their ack wait.", "biz_type"),
		fromLog: counter("acks_from_log_total",
			"Attempts settled, at the end of their lease, by a reply found in the ack log (the replica that received it died before writing it).", "biz_type"),
		givenBack: counter("attempts_given_back_total",
			"Claimed attempts whose fire could not go out within their lease, returned to WAITING uncounted.", "biz_type"),
		dead: counter("tasks_dead_total", "Tasks that went DEAD.", "biz_type"),
		corrupt: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ax", Name: "records_unreadable_total",
			Help: "Task records that could not be decoded."}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "ax", Name: "tasks_indexed",
			Help: "Live task records (waiting and running) this replica indexes."}),
		ack:  newAckMetrics(reg),
		loop: newLoopMetrics(),
	}
	if reg != nil {
		reg.MustRegister(m.scheduled, m.rejected, m.duplicates, m.fired, m.lateness, m.alarmActive, m.acks, m.leaseExpired, m.givenBack, m.fromLog, m.dead, m.corrupt, m.pending)
		reg.MustRegister(m.loop.collectors()...)
	}
	m.intake = newIntakeMetrics(reg)
	return m
}
