package membership

import (
	"testing"
	"testing/synctest"
	"time"
)

// A member whose own connection is down gives up its share and leaves a quarter of a lease
// later, though its heartbeats would go on; once the connection is back it joins again.
func TestConnectionDownLeaves(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		a, b := join(t, s, "a", nil), join(t, s, "b", nil)
		synctest.Wait()
		a.conn.set(false)
		after(lease/4 + time.Millisecond)
		if len(a.owned()) != 0 || len(b.owned()) != parts {
			t.Fatalf("a quarter of a lease after a's connection went down, a owns %d partitions, b %d", len(a.owned()), len(b.owned()))
		}
		if s.has("m.a") {
			t.Error("a's key is still in the bucket")
		}
		if v := value(t, a.leaves); v != 1 {
			t.Errorf("ax_fenced_leaves_total %v, want 1", v)
		}
		a.conn.set(true)
		after(lease)
		split(t, a, b)
	})
}

// Two outages in a row, each shorter than a quarter of a lease but together longer, are two
// blips: the member keeps its share.
func TestTwoBlipsKeepShare(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		a, b := join(t, s, "a", nil), join(t, s, "b", nil)
		synctest.Wait()
		mine := len(a.owned())
		for range 2 {
			a.conn.set(false)
			after(lease / 6)
			a.conn.set(true)
			after(time.Millisecond)
		}
		after(lease)
		if v := value(t, a.leaves); v != 0 {
			t.Errorf("ax_fenced_leaves_total %v after two blips, want 0", v)
		}
		if n := len(a.owned()); n != mine {
			t.Errorf("a owns %d partitions after two blips, %d before", n, mine)
		}
		split(t, a, b)
	})
}

// Exactly one member is the housekeeper; once it stops another takes over within a lease.
func TestHousekeeperElection(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		ns := []*node{join(t, s, "a", nil), join(t, s, "b", nil), join(t, s, "c", nil)}
		houses := func() []*node {
			var hs []*node
			for _, n := range ns {
				if n.isHouse() {
					hs = append(hs, n)
				}
			}
			return hs
		}
		after(lease)
		hs := houses()
		if len(hs) != 1 {
			t.Fatalf("%d housekeepers, want 1", len(hs))
		}
		hs[0].stop()
		ns = remove(ns, hs[0])
		after(lease / 2)
		if hs := houses(); len(hs) != 1 {
			t.Fatalf("after the housekeeper stopped, %d housekeepers, want 1", len(hs))
		}
	})
}

func remove(ns []*node, n *node) []*node {
	var out []*node
	for _, o := range ns {
		if o != n {
			out = append(out, o)
		}
	}
	return out
}

// A members watch that ends is started again, with pauses while it fails, and the view goes on.
func TestWatchEndsRestarts(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		a := join(t, s, "a", nil)
		s.set("a", func(f *faults) { f.failWatch = 3 })
		s.endWatches()
		after(lease / 2)
		b := join(t, s, "b", nil)
		synctest.Wait()
		split(t, a, b)
	})
}

// A member whose first heartbeat fails does not start, and what it began ends.
func TestStartFailsWithoutHeartbeat(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		s.set("a", func(f *faults) { f.cut = true })
		m, err := New(Config{ReplicaID: "a", Partitions: parts, Store: s.of("a")})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(t.Context()); err == nil {
			t.Fatal("Start succeeded without a heartbeat")
		}
		_ = m.Stop(t.Context())
		synctest.Wait()
	})
}

func TestConfigValidates(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{}); err == nil {
		t.Error("New accepted an empty Config")
	}
	if _, err := New(Config{ReplicaID: "a", Partitions: 1, Store: newMemStore().of("a")}); err != nil {
		t.Errorf("New: %v", err)
	}
}
