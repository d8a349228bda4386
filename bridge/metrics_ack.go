package bridge

import (
	"context"
	"errors"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

// Store operations, the op label of ax_store_errors_total and ax_store_unknown_outcomes_total.
// Other parts of the bridge add their own ops to the same two series.
const (
	opClaim     = "claim"      // the claim write, WAITING → RUNNING
	opClaimRead = "claim_read" // reading back a claim whose outcome is unknown
	opAck       = "ack"        // the write of a consumer's reply
	opAckRead   = "ack_read"   // reading the record to apply a reply
)

// ackMetrics are the series of claims and acks under faults.
type ackMetrics struct {
	storeErrors *prometheus.CounterVec // every failed store call (conflicts and missing records are outcomes, not failures)
	unknown     *prometheus.CounterVec // the subset that may have been applied all the same
	drops       dropCounter
}

func newAckMetrics(reg prometheus.Registerer) *ackMetrics {
	m := &ackMetrics{
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ax", Name: "store_errors_total",
			Help: "Task store operations that failed, by operation."}, []string{"op"}),
		unknown: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ax", Name: "store_unknown_outcomes_total",
			Help: "Task store writes that got no answer, so may or may not have landed, by operation."}, []string{"op"}),
	}
	dropped := prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "ax", Name: "ack_dropped_total",
		Help: "Acks the client dropped because an ack subscription was over its pending limits (slow consumer)."},
		m.drops.total)
	if reg != nil {
		m.storeErrors = registerShared(reg, m.storeErrors)
		m.unknown = registerShared(reg, m.unknown)
		reg.MustRegister(dropped)
	}
	return m
}

// registerShared registers c, or returns the collector of the same name already registered (the
// store series are shared by every part of the bridge that calls the store). Every part must give
// the series the same help text: the registry refuses one that differs.
func registerShared(reg prometheus.Registerer, c *prometheus.CounterVec) *prometheus.CounterVec {
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

// storeFailed records a failed store call of op on task id: the one place where claims and acks
// report store failures (metrics here; an outage log may hook in too).
func (b *Bridge) storeFailed(op, id string, err error) {
	b.m.ack.storeError(op, err)
	b.outage.failed(op, id, err)
	b.log.Debug("store call failed; retrying", "op", op, "task_id", id, "err", err)
}

// storeError counts a failed store call of op.
func (m *ackMetrics) storeError(op string, err error) {
	m.storeErrors.WithLabelValues(op).Inc()
	if unknownOutcome(err) {
		m.unknown.WithLabelValues(op).Inc()
	}
}

// unknownOutcome reports whether a failed write may have been applied: it got no answer in time
// or the connection closed while it waited.
func unknownOutcome(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionReconnecting)
}

// countDrops makes ax_ack_dropped_total follow the subscriptions' drop counts.
func (m *ackMetrics) countDrops(subs ...*nats.Subscription) {
	m.drops.mu.Lock()
	m.drops.subs = append(m.drops.subs, subs...)
	m.drops.seen = append(m.drops.seen, make([]int, len(subs))...)
	m.drops.mu.Unlock()
}

// dropCounter sums the messages the client dropped on the ack subscriptions. A subscription's
// count is read at each scrape and kept once it is closed (Dropped then fails).
type dropCounter struct {
	mu   sync.Mutex
	subs []*nats.Subscription
	seen []int
}

func (d *dropCounter) total() float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for i, s := range d.subs {
		if c, err := s.Dropped(); err == nil && c > d.seen[i] {
			d.seen[i] = c
		}
		n += d.seen[i]
	}
	return float64(n)
}
