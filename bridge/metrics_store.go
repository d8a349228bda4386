package bridge

import "github.com/prometheus/client_golang/prometheus"

// storeMetrics count failed task store operations by op (create, claim, ack, ...).
type storeMetrics struct {
	errors  *prometheus.CounterVec // every failed store call
	unknown *prometheus.CounterVec // failed calls whose write may have landed (timeout, connection closed)
}

func newStoreMetrics(reg prometheus.Registerer) *storeMetrics {
	m := &storeMetrics{
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ax", Name: "store_errors_total",
			Help: "Task store operations that failed, by operation."}, []string{"op"}),
		unknown: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ax", Name: "store_unknown_outcomes_total",
			Help: "Task store writes that got no answer, so may or may not have landed, by operation."}, []string{"op"}),
	}
	if reg != nil {
		reg.MustRegister(m.errors, m.unknown)
	}
	return m
}
