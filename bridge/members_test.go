package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/bridge/internal/membership"
	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// assign is membership.Assign, for the tests that pick tasks by where their partition goes.
func assign(members []string, n int) []string { return membership.Assign(members, n) }

// partEnv is several bridges of one JetStream task bucket on one in-process server, each on its
// own connection, and a consumer that records every fire.
type partEnv struct {
	t     *testing.T
	srv   *natstest.Server
	nc    *nats.Conn // the consumer's and the test's
	store *kvstore.JetStore
	n     int // partitions
	lease time.Duration

	mu    sync.Mutex
	fires []partFire
	hold  []*nats.Msg // fires not acked, when ack is false
	ack   atomic.Bool
	tune  func(*Config) // if set, changes each replica's configuration before it starts
}

type partFire struct {
	id, replica string
	attempt     string
	at          time.Time
}

func newPartEnv(t *testing.T, partitions int, lease time.Duration) *partEnv {
	t.Helper()
	srv := natstest.RunServer(t)
	e := &partEnv{t: t, srv: srv, nc: natstest.Connect(t, srv.ClientURL()), n: partitions, lease: lease}
	e.store = e.openStore()
	e.ack.Store(true)
	sub, err := e.nc.Subscribe(FirePrefix+"part", func(m *nats.Msg) {
		e.mu.Lock()
		e.fires = append(e.fires, partFire{id: m.Header.Get(HeaderTaskID), replica: m.Header.Get(HeaderReplica),
			attempt: m.Header.Get(HeaderAttempt), at: time.Now()})
		ack := e.ack.Load()
		if !ack {
			e.hold = append(e.hold, m)
		}
		e.mu.Unlock()
		if ack {
			_ = m.Respond([]byte("+ACK"))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *partEnv) openStore() *kvstore.JetStore {
	e.t.Helper()
	nc := natstest.Connect(e.t, e.srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		e.t.Fatal(err)
	}
	s, err := kvstore.OpenJetStore(context.Background(), js, kvstore.Config{Partitions: e.n})
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// replica is one bridge of a partEnv and its connection (closing it is a hard stop: no more
// heartbeats, no leave).
type replica struct {
	b  *Bridge
	nc *nats.Conn
}

// start runs a bridge named id; wrap, if set, sits between it and the members bucket.
func (e *partEnv) start(id string, wrap func(Membership) Membership) *replica {
	e.t.Helper()
	return e.startOn(id, natstest.Connect(e.t, e.srv.ClientURL()), wrap)
}

// startOn is start with the bridge's connection nc.
func (e *partEnv) startOn(id string, nc *nats.Conn, wrap func(Membership) Membership) *replica {
	e.t.Helper()
	return e.startWith(id, nc, wrap, nil)
}

// startSplit is startOn with the replica's heartbeats on a connection of their own, to the server
// directly (as the command sends them), so that nc can go down while they go on.
func (e *partEnv) startSplit(id string, nc *nats.Conn) *replica {
	e.t.Helper()
	mjs, err := jetstream.New(natstest.Connect(e.t, e.srv.ClientURL()))
	if err != nil {
		e.t.Fatal(err)
	}
	return e.startOn(id, nc, func(Membership) Membership {
		m, err := kvstore.OpenMembers(context.Background(), mjs, kvstore.MembersConfig{Bucket: e.store.Bucket() + "_MEMBERS"})
		if err != nil {
			e.t.Fatal(err)
		}
		return m
	})
}

// startWith is startOn; wrapStore, if set, sits between the bridge and its task store.
func (e *partEnv) startWith(id string, nc *nats.Conn, wrap func(Membership) Membership, wrapStore func(*kvstore.JetStore) Store) *replica {
	e.t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		e.t.Fatal(err)
	}
	store, err := kvstore.OpenJetStore(context.Background(), js, kvstore.Config{Partitions: e.n})
	if err != nil {
		e.t.Fatal(err)
	}
	cfg := Config{ReplicaID: id, PartitionLease: e.lease, AckWait: 5 * time.Second, Backoff: []time.Duration{time.Second},
		Logger: slog.New(slog.NewTextHandler(tWriter{e.t}, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	if e.tune != nil {
		e.tune(&cfg)
	}
	if wrap != nil {
		m, err := kvstore.OpenMembers(context.Background(), js, kvstore.MembersConfig{Bucket: store.Bucket() + "_MEMBERS"})
		if err != nil {
			e.t.Fatal(err)
		}
		cfg.Members = wrap(m)
	}
	var st Store = store
	if wrapStore != nil {
		st = wrapStore(store)
	}
	b, err := New(nc, st, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Stop(ctx); err != nil && !nc.IsClosed() {
			e.t.Errorf("stop bridge %s: %v", id, err)
		}
	})
	select {
	case <-b.Ready():
	case <-time.After(10 * time.Second):
		e.t.Fatalf("bridge %s not ready", id)
	}
	return &replica{b: b, nc: nc}
}

// owned is the set of partitions r owns now.
func (r *replica) owned() []int {
	o := r.b.own.Load()
	if o == nil || !time.Now().Before(o.until) {
		return nil
	}
	return o.owned()
}

// stable waits until each of the live replicas rs owns some partitions and together they own
// every partition exactly once.
func (e *partEnv) stable(rs ...*replica) {
	e.t.Helper()
	var last string
	ok := checkFor(15*time.Second, func() bool {
		seen := make([]int, e.n)
		for _, r := range rs {
			ps := r.owned()
			if len(ps) == 0 {
				last = r.b.ReplicaID() + " owns none"
				return false
			}
			for _, p := range ps {
				seen[p]++
			}
		}
		last = fmt.Sprint(seen)
		for _, c := range seen {
			if c != 1 {
				return false
			}
		}
		return true
	})
	if !ok {
		e.t.Fatalf("ownership not stable: owners per partition %s", last)
	}
}

// idsIn returns k task ids (prefix-<i>) whose partitions satisfy keep.
func (e *partEnv) idsIn(prefix string, k int, keep func(p int) bool) []string {
	var ids []string
	for i := 0; len(ids) < k; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if keep(kvstore.Partition(id, e.n)) {
			ids = append(ids, id)
		}
	}
	return ids
}

// create stores WAITING tasks due at dueMs, as intake would.
func (e *partEnv) create(ids []string, dueMs int64) {
	e.t.Helper()
	now := time.Now().UnixMilli()
	for _, id := range ids {
		if _, err := e.store.Create(context.Background(), &kvstore.Task{ID: id, BizType: "part", Payload: []byte(id),
			Status: kvstore.StatusWaiting, DueAt: dueMs, MaxRetry: 3, AckWait: 5 * time.Second,
			Backoff: []time.Duration{time.Second}, CreatedAt: now, UpdatedAt: now}); err != nil {
			e.t.Fatal(err)
		}
	}
}

// schedule publishes schedule messages through the intake stream.
func (e *partEnv) schedule(ids []string, delay func(i int) time.Duration) {
	e.t.Helper()
	js, err := jetstream.New(e.nc)
	if err != nil {
		e.t.Fatal(err)
	}
	for i, id := range ids {
		m := nats.NewMsg(SchedulePrefix + "part")
		m.Header.Set(HeaderTaskID, id)
		m.Header.Set(HeaderDelay, delay(i).String())
		m.Header.Set(HeaderAckWait, "5s")
		if _, err := js.PublishMsg(context.Background(), m); err != nil {
			e.t.Fatal(err)
		}
	}
}

// settled waits until every task of ids is SUCCESS.
func (e *partEnv) settled(ids []string, within time.Duration) {
	e.t.Helper()
	var pending string
	if !checkFor(within, func() bool {
		for _, id := range ids {
			en, err := e.store.Get(context.Background(), id)
			if err != nil || en.Task.Status != kvstore.StatusSuccess {
				pending = fmt.Sprintf("%s: %v %v", id, en.Task.Status, err)
				return false
			}
		}
		return true
	}) {
		e.t.Fatalf("not every task succeeded; still %s", pending)
	}
}

// firesOf returns the fires of the given ids, by id.
func (e *partEnv) firesOf(ids []string) map[string][]partFire {
	e.mu.Lock()
	defer e.mu.Unlock()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	out := map[string][]partFire{}
	for _, f := range e.fires {
		if want[f.id] {
			out[f.id] = append(out[f.id], f)
		}
	}
	return out
}

// once checks that every task of ids fired exactly once, and returns how many each replica fired.
func (e *partEnv) once(ids []string) map[string]int {
	e.t.Helper()
	by := map[string]int{}
	fs := e.firesOf(ids)
	for _, id := range ids {
		if len(fs[id]) != 1 {
			e.t.Errorf("task %s fired %d times: %+v", id, len(fs[id]), fs[id])
			continue
		}
		by[fs[id][0].replica]++
	}
	return by
}

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

// flakyMembers fails this replica's heartbeats while cut is set, as if it were cut off NATS.
type flakyMembers struct {
	Membership
	cut atomic.Bool
}

func (f *flakyMembers) Heartbeat(ctx context.Context, replica string, ttl time.Duration) error {
	if f.cut.Load() {
		return errors.New("cut off")
	}
	return f.Membership.Heartbeat(ctx, replica, ttl)
}

// A replica whose heartbeats fail gives up every partition within its lease and claims and fires
// nothing after that, while the other takes everything over; in each partition, the fenced
// replica's last fire comes before the new owner's first (tasks fall due all through the cut);
// once its heartbeats are confirmed again it takes its share back.
func TestSelfFencing(t *testing.T) {
	t.Parallel()
	e := newPartEnv(t, 60, time.Second)
	flaky := &flakyMembers{}
	a := e.start("sa", func(m Membership) Membership { flaky.Membership = m; return flaky })
	b := e.start("sb", nil)
	e.stable(a, b)
	// 240 tasks due every 10 ms from 0.4 s before the cut to 2 s after it: through the fence (at
	// most a lease) and the hand-off.
	through := e.idsIn("through", 240, func(int) bool { return true })
	cutAt := time.Now().Add(time.Second)
	for i, id := range through {
		e.create([]string{id}, cutAt.Add(-400*time.Millisecond+time.Duration(i)*10*time.Millisecond).UnixMilli())
	}
	<-time.After(time.Until(cutAt)) // the cut falls among the due times, by design
	flaky.cut.Store(true)
	cut := time.Now()
	if !checkFor(5*time.Second, func() bool { return len(a.owned()) == 0 && len(b.owned()) == e.n }) {
		t.Fatalf("after its heartbeats failed, sa owns %d partitions and sb %d", len(a.owned()), len(b.owned()))
	}
	fenced := time.Since(cut)
	e.settled(through, 15*time.Second)
	by := e.once(through)
	lastA, firstB := map[int]time.Time{}, map[int]time.Time{}
	for id, fs := range e.firesOf(through) {
		p := kvstore.Partition(id, e.n)
		for _, f := range fs {
			switch f.replica {
			case "sa":
				if f.at.After(lastA[p]) {
					lastA[p] = f.at
				}
			case "sb":
				if cur, ok := firstB[p]; f.at.After(cut) && (!ok || f.at.Before(cur)) {
					firstB[p] = f.at
				}
			}
		}
	}
	handed := 0
	for p, at := range lastA {
		if b, ok := firstB[p]; ok {
			handed++
			if !at.Before(b) {
				t.Errorf("partition %d: the fenced replica sa fired at +%v after the cut, the new owner sb first at +%v", p, at.Sub(cut), b.Sub(cut))
			}
		}
	}
	if by["sa"] == 0 || handed == 0 {
		t.Errorf("the hand-off was not exercised: fires by replica %v, %d partitions fired by sa then by sb", by, handed)
	}
	if o := a.b.own.Load(); o.n != 0 && time.Now().Before(o.until) {
		t.Fatalf("sa still counts itself owner of %d partitions", o.n)
	}
	ids := e.idsIn("fence", 60, func(int) bool { return true })
	e.create(ids, time.Now().UnixMilli())
	e.settled(ids, 15*time.Second)
	if by := e.once(ids); by["sa"] != 0 || by["sb"] != len(ids) {
		t.Errorf("while sa is cut off, fires by replica %v; want all by sb", by)
	}
	fires := e.firesOf(ids)
	for _, fs := range fires {
		for _, f := range fs {
			if f.replica == "sa" {
				t.Errorf("task %s fired by the fenced replica", f.id)
			}
		}
	}
	t.Logf("sa gave up its partitions %v after its heartbeats began to fail (lease 1s)", fenced)

	flaky.cut.Store(false)
	e.stable(a, b)
	if len(a.owned()) == 0 {
		t.Fatal("sa owns nothing after it rejoined")
	}
	again := e.idsIn("rejoin", 60, func(int) bool { return true })
	e.create(again, time.Now().UnixMilli())
	e.settled(again, 15*time.Second)
	if by := e.once(again); by["sa"] == 0 || by["sb"] == 0 {
		t.Errorf("after sa rejoined, fires by replica %v; want both to fire", by)
	}
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
