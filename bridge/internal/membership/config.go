package membership

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/axbridge/axbridge/kvstore"
)

// Store is the membership bucket; *kvstore.Members implements it.
type Store interface {
	Heartbeat(ctx context.Context, replica string, value []byte, ttl time.Duration) error
	Leave(ctx context.Context, replica string) error
	WatchMembers(ctx context.Context) (<-chan kvstore.MemberEvent, error)
	Campaign(ctx context.Context, key, holder string, ttl time.Duration) (uint64, error)
	Renew(ctx context.Context, key, holder string, rev uint64, ttl time.Duration) (uint64, error)
	Resign(ctx context.Context, key string, rev uint64) error
}

// Conn is the replica's own NATS connection, as *nats.Conn reports it.
type Conn interface {
	IsConnected() bool
	StatusChanged(statuses ...nats.Status) chan nats.Status
	RemoveStatusListener(ch chan nats.Status)
}

// Ownership is a snapshot of the partitions this replica owns; it is never changed once published.
type Ownership struct {
	Parts   []bool    // by partition: owned
	N       int       // how many are owned
	Until   time.Time // owned until then (Clock), unless a heartbeat renews it
	Members int       // live replicas in this replica's view, itself included
	Rank    int       // this replica's place among them, sorted by id (0 when fenced)
}

// Metrics are the series the member keeps; nil ones are kept nowhere.
type Metrics struct {
	Owned           prometheus.Gauge
	Housekeeper     prometheus.Gauge
	HeartbeatErrors prometheus.Counter
	FencedLeaves    prometheus.Counter
}

// Config configures a Member. The callbacks run on the member's goroutine (or in Start before
// it runs) and must not block.
type Config struct {
	ReplicaID  string        // required
	Partitions int           // the task bucket's partition count; required
	Lease      time.Duration // how long others count a replica alive after its heartbeat (default 5s)
	Store      Store         // required
	Conn       Conn          // nil: always connected
	Logger     *slog.Logger  // default: discard
	Clock      Clock         // default: the runtime's
	Metrics    Metrics

	// Acks is given the partitions whose acks this replica takes from now on: those it owns and
	// those it lost less than a lease ago. A gain comes before the snapshot that owns it.
	Acks func(parts []bool)
	// Flush is called in Start after the first Acks and before the first heartbeat; it returns
	// once the server has the ack subscriptions. An error fails Start.
	Flush func(ctx context.Context) error
	// Own is given every snapshot; changed says the owned set changed or the fence just ended.
	Own func(o Ownership, changed bool)
	// Sweep is given, once a lease, the partitions whose acks no longer come here (if any).
	Sweep func(gone []bool)
	// Housekeeper is told each time this replica becomes or stops being the housekeeper.
	Housekeeper func(is bool)
}

func (c Config) withDefaults() Config {
	if c.Lease == 0 {
		c.Lease = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Clock == nil {
		c.Clock = runtimeClock{}
	}
	m := &c.Metrics
	if m.Owned == nil {
		m.Owned = prometheus.NewGauge(prometheus.GaugeOpts{Name: "owned"})
	}
	if m.Housekeeper == nil {
		m.Housekeeper = prometheus.NewGauge(prometheus.GaugeOpts{Name: "housekeeper"})
	}
	if m.HeartbeatErrors == nil {
		m.HeartbeatErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "heartbeat_errors"})
	}
	if m.FencedLeaves == nil {
		m.FencedLeaves = prometheus.NewCounter(prometheus.CounterOpts{Name: "fenced_leaves"})
	}
	if c.Acks == nil {
		c.Acks = func([]bool) {}
	}
	if c.Flush == nil {
		c.Flush = func(context.Context) error { return nil }
	}
	if c.Own == nil {
		c.Own = func(Ownership, bool) {}
	}
	if c.Sweep == nil {
		c.Sweep = func([]bool) {}
	}
	if c.Housekeeper == nil {
		c.Housekeeper = func(bool) {}
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.ReplicaID == "" {
		errs = append(errs, errors.New("a replica id is required"))
	}
	if c.Partitions < 1 {
		errs = append(errs, fmt.Errorf("partitions %d: want at least 1", c.Partitions))
	}
	if c.Lease < 4*time.Millisecond {
		errs = append(errs, fmt.Errorf("lease %v: want at least 4ms", c.Lease))
	}
	if c.Store == nil {
		errs = append(errs, errors.New("a store is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("membership: %w", err)
	}
	return nil
}

// margin is how much earlier than the others this replica stops owning its partitions after its
// last confirmed heartbeat.
func (c Config) margin() time.Duration { return c.Lease / 5 }
