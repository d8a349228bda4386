package bridge

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// Three bridges on one server divide 60 partitions (20 each, together all, none twice), each
// fires and indexes only its own, every task fires once, and no claim conflicts.
func TestReplicasDividePartitions(t *testing.T) {
	t.Parallel()
	e := newPartEnv(t, 60, 2*time.Second)
	rs := []*replica{e.start("ra", nil), e.start("rb", nil), e.start("rc", nil)}
	e.stable(rs...)
	owner := map[int]string{}
	for _, r := range rs {
		ps := r.owned()
		if len(ps) != 20 {
			t.Errorf("%s owns %d partitions, want 20", r.b.ReplicaID(), len(ps))
		}
		for _, p := range ps {
			owner[p] = r.b.ReplicaID()
		}
	}
	ids := e.idsIn("div", 300, func(int) bool { return true })
	e.schedule(ids, func(i int) time.Duration { return time.Duration(i%10) * 100 * time.Millisecond })
	e.settled(ids, 20*time.Second)
	by := e.once(ids)
	for id, fs := range e.firesOf(ids) {
		if p := kvstore.Partition(id, e.n); fs[0].replica != owner[p] {
			t.Errorf("task %s of partition %d fired by %s; its owner is %s", id, p, fs[0].replica, owner[p])
		}
	}
	t.Logf("fires by replica: %v", by)
	// Each replica indexes the pending tasks of its own partitions, and only those.
	far := e.idsIn("far", 600, func(int) bool { return true })
	e.create(far, time.Now().Add(time.Hour).UnixMilli())
	want := map[string]int{}
	for _, id := range far {
		want[owner[kvstore.Partition(id, e.n)]]++
	}
	for _, r := range rs {
		id := r.b.ReplicaID()
		if !checkFor(10*time.Second, func() bool { return int(value(t, r.b.m.pending)) == want[id] }) {
			t.Errorf("%s indexes %v tasks; %d of the 600 pending are in its partitions", id, value(t, r.b.m.pending), want[id])
		}
	}
	t.Logf("600 pending tasks indexed by replica: %v", want)
	for _, r := range rs {
		if c := value(t, r.b.m.members.claimConflicts); c != 0 {
			t.Errorf("%s: %v claim conflicts in steady state, want 0", r.b.ReplicaID(), c)
		}
		if got := value(t, r.b.m.members.owned); int(got) != len(r.owned()) {
			t.Errorf("%s: ax_partitions_owned %v, owns %d", r.b.ReplicaID(), got, len(r.owned()))
		}
	}
}

// A replica stopped hard (its connection closed: no heartbeat, no leave) loses its partitions to
// the survivors, which fire its due tasks. The time from the stop to those fires is logged (lease
// 1s), not asserted.
func TestFailoverAfterHardStop(t *testing.T) {
	t.Parallel()
	const runs = 3
	var first, last []time.Duration
	for run := range runs {
		e := newPartEnv(t, 60, time.Second)
		rs := []*replica{e.start("fa", nil), e.start("fb", nil), e.start("fc", nil)}
		e.stable(rs...)
		victim := rs[run%3]
		mine := map[int]bool{}
		for _, p := range victim.owned() {
			mine[p] = true
		}
		ids := e.idsIn(fmt.Sprintf("fo%d", run), 20, func(p int) bool { return mine[p] })
		stopped := time.Now()
		victim.nc.Close()
		e.create(ids, stopped.UnixMilli())
		e.settled(ids, 15*time.Second)
		e.once(ids)
		var lat []time.Duration
		for _, fs := range e.firesOf(ids) {
			lat = append(lat, fs[0].at.Sub(stopped))
			if fs[0].replica == victim.b.ReplicaID() {
				t.Errorf("task %s fired by the stopped replica", fs[0].id)
			}
		}
		slices.Sort(lat)
		first, last = append(first, lat[0]), append(last, lat[len(lat)-1])
		var survivors []*replica
		for _, r := range rs {
			if r != victim {
				survivors = append(survivors, r)
			}
		}
		e.stable(survivors...)
	}
	t.Logf("lease 1s: from the hard stop to the first fire of its partitions %v, to the last %v", first, last)
}

// An ack sent while its partition moves, or after the replica that fired has died, is applied by
// the partition's new owner: the task becomes SUCCESS and does not fire again.
func TestAckDuringMove(t *testing.T) {
	t.Parallel()
	for _, kill := range []bool{false, true} {
		t.Run(fmt.Sprintf("firing replica stopped hard=%v", kill), func(t *testing.T) {
			t.Parallel()
			e := newPartEnv(t, 60, 2*time.Second)
			e.ack.Store(false)
			a := e.start("ma", nil)
			e.stable(a)
			// A task whose partition moves to mb once mb joins.
			ids := e.idsIn("move", 1, func(p int) bool { return assign([]string{"ma", "mb"}, e.n)[p] == "mb" })
			e.create(ids, time.Now().UnixMilli())
			if !checkFor(10*time.Second, func() bool { return len(e.firesOf(ids)[ids[0]]) == 1 }) {
				t.Fatal("the task did not fire")
			}
			if f := e.firesOf(ids)[ids[0]][0]; f.replica != "ma" {
				t.Fatalf("fired by %s, want ma", f.replica)
			}
			b := e.start("mb", nil)
			p := kvstore.Partition(ids[0], e.n)
			if kill {
				a.nc.Close()
				e.stable(b)
			} else {
				e.stable(a, b)
			}
			if !slices.Contains(b.owned(), p) {
				t.Fatalf("partition %d did not move to mb", p)
			}
			e.mu.Lock()
			m := e.hold[0]
			e.mu.Unlock()
			if _, err := e.nc.Request(m.Reply, []byte("+ACK"), 5*time.Second); err != nil {
				t.Fatalf("ack request: %v", err)
			}
			e.settled(ids, 5*time.Second)
			if n := len(e.firesOf(ids)[ids[0]]); n != 1 {
				t.Errorf("the task fired %d times", n)
			}
		})
	}
}

// A second replica that joins takes its share of the partitions while tasks keep firing, and no
// task fires twice.
func TestJoinTakesShare(t *testing.T) {
	t.Parallel()
	e := newPartEnv(t, 60, 2*time.Second)
	a := e.start("ja", nil)
	e.stable(a)
	far := e.idsIn("later", 300, func(int) bool { return true })
	e.create(far, time.Now().Add(time.Hour).UnixMilli())
	ids := e.idsIn("join", 200, func(int) bool { return true })
	e.schedule(ids, func(i int) time.Duration { return time.Duration(i) * 15 * time.Millisecond }) // over 3s
	if !checkFor(10*time.Second, func() bool { return len(e.firesOf(ids)) >= 40 }) {
		t.Fatal("tasks do not fire")
	}
	b := e.start("jb", nil)
	e.stable(a, b)
	e.settled(ids, 20*time.Second)
	by := e.once(ids)
	t.Logf("fires by replica: %v; claim conflicts ja %v, jb %v", by,
		value(t, a.b.m.members.claimConflicts), value(t, b.b.m.members.claimConflicts))
	if len(b.owned()) == 0 || len(a.owned()) == 0 {
		t.Errorf("after the join ja owns %d partitions, jb %d", len(a.owned()), len(b.owned()))
	}
	for _, fs := range e.firesOf(ids) {
		if fs[0].attempt != "1" {
			t.Errorf("task %s first fired as attempt %s", fs[0].id, fs[0].attempt)
		}
	}
	// ja dropped what it had indexed of the partitions it gave up; jb loaded them.
	for _, r := range []*replica{a, b} {
		mine := map[int]bool{}
		for _, p := range r.owned() {
			mine[p] = true
		}
		want := 0
		for _, id := range far {
			if mine[kvstore.Partition(id, e.n)] {
				want++
			}
		}
		if !checkFor(10*time.Second, func() bool { return int(value(t, r.b.m.pending)) == want }) {
			t.Errorf("%s indexes %v tasks; %d of the 300 pending are in its partitions", r.b.ReplicaID(), value(t, r.b.m.pending), want)
		}
	}
}

// Exactly one replica is the housekeeper; when it stops another takes over.
func TestHousekeeperElection(t *testing.T) {
	t.Parallel()
	e := newPartEnv(t, 60, 2*time.Second)
	rs := []*replica{e.start("ha", nil), e.start("hb", nil), e.start("hc", nil)}
	houses := func(rs []*replica) []string {
		var ids []string
		for _, r := range rs {
			if r.b.house.Load() {
				ids = append(ids, r.b.ReplicaID())
			}
		}
		sort.Strings(ids)
		return ids
	}
	var got []string
	if !checkFor(10*time.Second, func() bool { got = houses(rs); return len(got) == 1 }) {
		t.Fatalf("housekeepers %v, want one", got)
	}
	var rest []*replica
	for _, r := range rs {
		if r.b.ReplicaID() == got[0] {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := r.b.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			cancel()
		} else {
			rest = append(rest, r)
		}
	}
	var next []string
	if !checkFor(10*time.Second, func() bool { next = houses(rest); return len(next) == 1 }) {
		t.Fatalf("after %s stopped, housekeepers %v, want one", got[0], next)
	}
	for _, r := range rest {
		want := 0.0
		if r.b.ReplicaID() == next[0] {
			want = 2
		}
		if !checkFor(5*time.Second, func() bool { return value(t, r.b.m.members.members) == want }) {
			t.Errorf("%s: ax_members %v, want %v", r.b.ReplicaID(), value(t, r.b.m.members.members), want)
		}
	}
}

// Heartbeats on a connection of their own (as the command sends them) do not keep a replica the
// owner of its partitions while its own connection is down: it heartbeats nothing then, and the
// others take its partitions.
func TestWorkConnectionDownFences(t *testing.T) {
	t.Parallel()
	e := newPartEnv(t, 60, time.Second)
	// sa's connection stays away for a while once the server drops it.
	nc := natstest.Connect(t, e.srv.ClientURL(), nats.ReconnectWait(30*time.Second))
	a := e.startSplit("sa", nc)
	b := e.start("sb", nil)
	e.stable(a, b)
	cid, err := nc.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.srv.NATS().DisconnectClientByID(cid); err != nil {
		t.Fatal(err)
	}
	if !checkFor(10*time.Second, func() bool { return len(a.owned()) == 0 && len(b.owned()) == e.n }) {
		t.Fatalf("with its connection down, sa owns %d partitions and sb %d", len(a.owned()), len(b.owned()))
	}
	nc.Close() // it would come back only after 30 s; a closed connection's bridge stops at once
}
