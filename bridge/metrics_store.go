package bridge

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

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
		m.errors, m.unknown = sharedVec(reg, m.errors), sharedVec(reg, m.unknown)
	}
	return m
}

// sharedVec registers c, or returns the collector of that name already registered: the store
// series are shared by every part of the bridge that calls the store.
func sharedVec(reg prometheus.Registerer, c *prometheus.CounterVec) *prometheus.CounterVec {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if prev, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
			return prev
		}
	}
	if err != nil {
		panic(err)
	}
	return c
}
