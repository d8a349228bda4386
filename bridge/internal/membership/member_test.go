package membership

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// These tests run in a synctest bubble: time.Sleep moves the bubble's clock, and synctest.Wait
// returns once every member has done what that time asked of it.

const (
	lease = time.Second
	parts = 60
)

// node is one member and what its callbacks were given.
type node struct {
	t      *testing.T
	m      *Member
	conn   *fakeConn
	leaves prometheus.Counter
	errs   prometheus.Counter

	mu     sync.Mutex
	own    Ownership
	acks   []bool
	house  bool
	sweeps [][]bool
}

// join starts a member id on s; tune, if set, changes its configuration first.
func join(t *testing.T, s *memStore, id string, tune func(*Config)) *node {
	t.Helper()
	n := &node{t: t, conn: newFakeConn(),
		leaves: prometheus.NewCounter(prometheus.CounterOpts{Name: "leaves"}),
		errs:   prometheus.NewCounter(prometheus.CounterOpts{Name: "errs"})}
	cfg := Config{ReplicaID: id, Partitions: parts, Lease: lease, Store: s.of(id), Conn: n.conn,
		Logger:      slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Metrics:     Metrics{FencedLeaves: n.leaves, HeartbeatErrors: n.errs},
		Acks:        func(p []bool) { n.mu.Lock(); n.acks = p; n.mu.Unlock() },
		Own:         func(o Ownership, _ bool) { n.mu.Lock(); n.own = o; n.mu.Unlock() },
		Sweep:       func(g []bool) { n.mu.Lock(); n.sweeps = append(n.sweeps, g); n.mu.Unlock() },
		Housekeeper: func(is bool) { n.mu.Lock(); n.house = is; n.mu.Unlock() }}
	if tune != nil {
		tune(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	n.m = m
	t.Cleanup(func() { n.stop() })
	return n
}

func (n *node) stop() {
	if err := n.m.Stop(context.Background()); err != nil {
		n.t.Errorf("stop %s: %v", n.m.cfg.ReplicaID, err)
	}
}

// owned is the partitions n owns now.
func (n *node) owned() []int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !time.Now().Before(n.own.Until) {
		return nil
	}
	var ps []int
	for p, ok := range n.own.Parts {
		if ok {
			ps = append(ps, p)
		}
	}
	return ps
}

func (n *node) acked() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return count(n.acks)
}

func (n *node) isHouse() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.house
}

// after lets d pass and waits until the members have acted on it.
func after(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// split checks that ns own every partition exactly once, in equal shares.
func split(t *testing.T, ns ...*node) {
	t.Helper()
	seen := make([]int, parts)
	for _, n := range ns {
		ps := n.owned()
		if k := len(ps); k != parts/len(ns) {
			t.Errorf("%s owns %d partitions, want %d", n.m.cfg.ReplicaID, k, parts/len(ns))
		}
		for _, p := range ps {
			seen[p]++
		}
	}
	for p, c := range seen {
		if c != 1 {
			t.Errorf("partition %d has %d owners", p, c)
		}
	}
}

// value reads a counter.
func value(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue()
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// A joiner takes its share at once; the other keeps the acks of what it lost for a lease, then
// sweeps them; a member that stops hands its share over at once.
func TestJoinAndStopMoveShares(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		a := join(t, s, "a", nil)
		if n := len(a.owned()); n != parts {
			t.Fatalf("alone, a owns %d partitions", n)
		}
		b := join(t, s, "b", nil)
		synctest.Wait()
		split(t, a, b)
		if n := a.acked(); n != parts {
			t.Errorf("right after b joined, a takes the acks of %d partitions, want all %d", n, parts)
		}
		after(lease + lease/4)
		if n := a.acked(); n != parts/2 {
			t.Errorf("a lease after b joined, a takes the acks of %d partitions, want %d", n, parts/2)
		}
		a.mu.Lock()
		swept := len(a.sweeps) > 0 && count(a.sweeps[len(a.sweeps)-1]) == parts/2
		a.mu.Unlock()
		if !swept {
			t.Error("a did not sweep the partitions it lost")
		}
		b.stop()
		synctest.Wait()
		if n := len(a.owned()); n != parts {
			t.Errorf("once b left, a owns %d partitions", n)
		}
	})
}

// A member whose heartbeats fail stops owning before the others count it dead; with its leave
// failing too it stays out; once its heartbeats work again it joins and takes its share back.
func TestCutMemberFencesFirst(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		a, b := join(t, s, "a", nil), join(t, s, "b", nil)
		synctest.Wait()
		split(t, a, b)
		s.set("a", func(f *faults) { f.cut = true })
		var fencedAt, takenAt time.Time
		for start := time.Now(); time.Since(start) < 3*lease; after(10 * time.Millisecond) {
			if fencedAt.IsZero() && len(a.owned()) == 0 {
				fencedAt = time.Now()
			}
			if takenAt.IsZero() && len(b.owned()) == parts {
				takenAt = time.Now()
			}
		}
		if fencedAt.IsZero() || takenAt.IsZero() || !fencedAt.Before(takenAt) {
			t.Fatalf("a fenced at %v, b took everything at %v: want a first", fencedAt, takenAt)
		}
		if v := value(t, a.errs); v == 0 {
			t.Error("ax_heartbeat_errors_total is 0")
		}
		s.set("a", func(f *faults) { f.cut = false })
		after(3 * lease)
		split(t, a, b)
		if v := value(t, a.leaves); v != 1 {
			t.Errorf("ax_fenced_leaves_total %v, want 1", v)
		}
	})
}

// A member whose heartbeats land but whose confirmations are lost leaves after half a lease
// fenced, so that the other takes its share although its key lives; then it joins again.
func TestUnconfirmedMemberLeaves(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		a, b := join(t, s, "a", nil), join(t, s, "b", nil)
		synctest.Wait()
		s.set("a", func(f *faults) { f.lose = true })
		after(2 * lease)
		if len(a.owned()) != 0 || len(b.owned()) != parts {
			t.Fatalf("a owns %d partitions, b %d", len(a.owned()), len(b.owned()))
		}
		// It left, and each join since, unconfirmed, left again at once.
		if v := value(t, a.leaves); v < 1 {
			t.Errorf("ax_fenced_leaves_total %v, want at least 1", v)
		}
		s.set("a", func(f *faults) { f.lose = false })
		after(3 * lease)
		split(t, a, b)
	})
}

// A member fenced for less than half a lease stays a member and keeps its share.
func TestBriefFenceKeepsShare(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		a, b := join(t, s, "a", nil), join(t, s, "b", nil)
		synctest.Wait()
		mine := a.owned()
		s.set("a", func(f *faults) { f.lose = true })
		for len(a.owned()) != 0 {
			after(10 * time.Millisecond)
		}
		s.set("a", func(f *faults) { f.lose = false })
		after(lease / 2)
		if got := a.owned(); !slices.Equal(got, mine) {
			t.Errorf("after a brief fence a owns %v, before %v", got, mine)
		}
		if v := value(t, a.leaves); v != 0 {
			t.Errorf("ax_fenced_leaves_total %v, want 0", v)
		}
		split(t, a, b)
	})
}
