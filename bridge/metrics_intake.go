package bridge

import "github.com/prometheus/client_golang/prometheus"

// intakeMetrics are the intake's own series, beside ax_schedule_rejected_total{code}.
type intakeMetrics struct {
	redeliveries prometheus.Counter // schedule messages delivered more than once
	restarts     prometheus.Counter // intake consumer set up again after consuming ended
	// maxDeliveries counts the server's advisories of messages that used up MaxDeliver unsettled.
	maxDeliveries prometheus.Counter
	purged        prometheus.Counter // intake messages removed by the housekeeper's purges
	purgeErrors   prometheus.Counter // purge rounds that failed
	purgeSkipped  prometheus.Counter // purge rounds skipped: a purge could remove unsettled messages
}

func newIntakeMetrics(reg prometheus.Registerer) *intakeMetrics {
	m := &intakeMetrics{
		redeliveries: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ax", Name: "intake_redeliveries_total",
			Help: "Schedule messages delivered again (a store write failed or timed out, or a replica stopped before acking)."}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ax", Name: "intake_restarts_total",
			Help: "Times the intake consumer was set up again after consuming ended (consumer or stream deleted)."}),
		maxDeliveries: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ax", Name: "intake_max_deliveries_total",
			Help: "Schedule messages that used up the intake consumer's max deliver without being settled (a bridge stopped during each of the last ones); only a consumer an operator gave a max deliver has one, and the messages wait in the stream (it is not purged then)."}),
		purged: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ax", Name: "intake_purged_total",
			Help: "Schedule messages the housekeeper purged from the intake stream once the intake consumer had acked them (limits retention)."}),
		purgeErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ax", Name: "intake_purge_errors_total",
			Help: "Purge rounds of the intake stream that failed (the next round purges what they would have)."}),
		purgeSkipped: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ax", Name: "intake_purge_skipped_total",
			Help: "Purge rounds of the intake stream skipped because a purge could remove messages not settled (another consumer on the stream, or an intake consumer that does not read all of it or has a max deliver); the stream grows meanwhile."}),
	}
	if reg != nil {
		reg.MustRegister(m.redeliveries, m.restarts, m.maxDeliveries, m.purged, m.purgeErrors, m.purgeSkipped)
	}
	return m
}
