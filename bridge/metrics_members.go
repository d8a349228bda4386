package bridge

import "github.com/prometheus/client_golang/prometheus"

// memberMetrics are the series of membership and ownership. Each is this replica's own, so that
// sum() over replicas is the truth: partitions owned add up to the bucket's count once ownership
// is stable, ax_housekeeper to 1, and ax_members is reported by the housekeeper alone.
type memberMetrics struct {
	owned           prometheus.Gauge
	housekeeper     prometheus.Gauge
	heartbeatErrors prometheus.Counter
	claimConflicts  prometheus.Counter
	fencedFires     prometheus.Counter
	fencedLeaves    prometheus.Counter
	members         prometheus.GaugeFunc
}

func newMemberMetrics(b *Bridge, reg prometheus.Registerer) *memberMetrics {
	m := &memberMetrics{
		owned: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "ax", Name: "partitions_owned",
			Help: "Partitions of the task bucket this replica owns (watches, claims and fires in)."}),
		housekeeper: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "ax", Name: "housekeeper",
			Help: "1 while this replica is the elected housekeeper, else 0."}),
		heartbeatErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ax", Name: "heartbeat_errors_total",
			Help: "Heartbeats of this replica that the membership bucket did not confirm."}),
		claimConflicts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ax", Name: "claim_conflicts_total",
			Help: "Claims that lost their CAS to another writer (another replica during a partition move, or an API call); about 0 in steady state."}),
		fencedFires: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ax", Name: "fires_fenced_total",
			Help: "Claims whose fire was not sent because the attempt's lease had ended by then (a paused replica, a very slow claim)."}),
		fencedLeaves: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ax", Name: "fenced_leaves_total",
			Help: "Times this replica left the members (deleted its key) because it did not own its partitions: no heartbeat confirmed in time, or its NATS connection down."}),
		members: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "ax", Name: "members",
			Help: "Live replicas as the housekeeper sees them; 0 on every other replica, so sum() is the count."},
			func() float64 {
				if b.house.Load() {
					return float64(b.liveMembers.Load())
				}
				return 0
			}),
	}
	if reg != nil {
		reg.MustRegister(m.owned, m.housekeeper, m.heartbeatErrors, m.claimConflicts, m.fencedFires, m.fencedLeaves, m.members)
	}
	return m
}
