package bridge

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// A replica whose own connection is down while its heartbeat connection works gives up its
// partitions and leaves a quarter of a lease later: the other takes them over well before the
// replica's key would have expired (a lease after its last heartbeat). The time its partitions
// stay unowned is logged.
func TestWorkConnectionDownLeaves(t *testing.T) {
	t.Parallel()
	const lease = 8 * time.Second
	var took []time.Duration
	for run := range 2 {
		e := newPartEnv(t, 60, lease)
		nc := natstest.Connect(t, e.srv.ClientURL(), nats.ReconnectWait(time.Minute))
		a := e.startSplit("la", nc)
		b := e.start("lb", nil)
		e.stable(a, b)
		cid, err := nc.GetClientID()
		if err != nil {
			t.Fatal(err)
		}
		cut := time.Now()
		if err := e.srv.NATS().DisconnectClientByID(cid); err != nil {
			t.Fatal(err)
		}
		// Well before la's key would have expired (a lease after its last heartbeat).
		if !checkFor(lease*3/4, func() bool { return len(b.owned()) == e.n }) {
			t.Fatalf("run %d: three quarters of a lease after la's connection went down, lb owns %d partitions", run, len(b.owned()))
		}
		took = append(took, time.Since(cut))
		if len(a.owned()) != 0 {
			t.Errorf("run %d: la still owns %d partitions", run, len(a.owned()))
		}
		// The other takes the partitions once the delete lands; la counts the leave once the
		// delete's answer is back, a moment later.
		if !checkFor(lease/2, func() bool { return value(t, a.b.m.members.fencedLeaves) == 1 }) {
			t.Errorf("run %d: ax_fenced_leaves_total %v, want 1", run, value(t, a.b.m.members.fencedLeaves))
		}
		nc.Close()
	}
	t.Logf("lease %v: la's partitions unowned for %v after its connection went down", lease, took)
}

// A replica whose connection drops and is back within a quarter of a lease keeps its partitions:
// a blip does not move them.
func TestConnectionBlipKeepsPartitions(t *testing.T) {
	t.Parallel()
	const lease = 12 * time.Second // a quarter (3 s) leaves the reconnection room on a busy machine
	e := newPartEnv(t, 60, lease)
	nc := natstest.Connect(t, e.srv.ClientURL(), nats.ReconnectWait(10*time.Millisecond))
	a := e.startSplit("ba", nc)
	b := e.start("bb", nil)
	e.stable(a, b)
	mine := len(a.owned())
	cid, err := nc.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.srv.NATS().DisconnectClientByID(cid); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	if !checkFor(lease/6, func() bool { return nc.Stats().Reconnects > 0 && nc.IsConnected() }) {
		t.Fatal("the connection did not come back within a sixth of the lease")
	}
	// A heartbeat that arrives a quarter of a lease after the cut was sent at a tick past the
	// moment a replica still cut off leaves; had it left, it would have counted the leave before.
	if !heartbeatAfter(t, e, "ba", cut.Add(lease/4), lease) {
		t.Fatal("no heartbeat of ba arrived a quarter of a lease after the blip")
	}
	if v := value(t, a.b.m.members.fencedLeaves); v != 0 {
		t.Errorf("ax_fenced_leaves_total %v after a blip, want 0", v)
	}
	if n := len(a.owned()); n != mine {
		t.Errorf("ba owns %d partitions after a blip, %d before", n, mine)
	}
}

// Two outages of a replica's own connection in a row, each shorter than a quarter of a lease but
// together longer, with no heartbeat tick between them, are two blips: the replica keeps its
// partitions (the reconnection ends the first outage; it must not count from the first one's
// start).
func TestTwoBlipsKeepPartitions(t *testing.T) {
	t.Parallel()
	const lease = 16 * time.Second // a grace of 4 s: each reconnection has a second on a busy machine
	grace := lease / 4             // how long a replica's connection may be down before it leaves
	e := newPartEnv(t, 60, lease)
	proxy := natstest.NewCutProxy(t, strings.TrimPrefix(e.srv.ClientURL(), "nats://"))
	nc := natstest.Connect(t, proxy.URL(), nats.ReconnectWait(10*time.Millisecond), nats.ReconnectJitter(0, 0))
	a := e.startSplit("tba", nc)
	b := e.start("tbb", nil)
	e.stable(a, b)
	mine := len(a.owned())
	// Begin right after a heartbeat tick: the next comes a grace later, during the second outage.
	if !heartbeatAfter(t, e, "tba", time.Now(), lease) {
		t.Fatal("no heartbeat of tba")
	}
	start := time.Now()
	// The sleeps shape the outages (half a grace, then from there to 1.2 graces after the
	// start); the test waits on nothing by them.
	proxy.SetCut(true)
	time.Sleep(grace / 2)
	proxy.SetCut(false)
	if !checkFor(grace/4, nc.IsConnected) {
		t.Fatal("the connection did not come back")
	}
	proxy.SetCut(true)
	time.Sleep(time.Until(start.Add(grace * 6 / 5)))
	proxy.SetCut(false)
	restored := time.Now()
	if !checkFor(grace/4, nc.IsConnected) {
		t.Fatal("the connection did not come back")
	}
	// A heartbeat sent after the outages comes at the next tick; had the replica left, it would
	// have counted the leave before (and its heartbeat would be a join).
	if !heartbeatAfter(t, e, "tba", restored, lease) {
		t.Fatal("no heartbeat of tba after the outages")
	}
	if v := value(t, a.b.m.members.fencedLeaves); v != 0 {
		t.Errorf("ax_fenced_leaves_total %v after two blips, want 0", v)
	}
	if n := len(a.owned()); n != mine {
		t.Errorf("tba owns %d partitions after two blips, %d before", n, mine)
	}
}

// membersKV is the members bucket of e's replicas, read with the test's connection.
func membersKV(t *testing.T, e *partEnv) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), e.store.Bucket()+"_MEMBERS")
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// memberKey returns replica's key in the members bucket; false if it has none.
func memberKey(t *testing.T, kv jetstream.KeyValue, replica string) (jetstream.KeyValueEntry, bool) {
	t.Helper()
	en, err := kv.Get(context.Background(), "m."+replica)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return en, true
}

// heartbeatAfter waits up to within for replica's key to be written at or after at (the server's
// time of the write).
func heartbeatAfter(t *testing.T, e *partEnv, replica string, at time.Time, within time.Duration) bool {
	t.Helper()
	kv := membersKV(t, e)
	return checkFor(within, func() bool {
		en, ok := memberKey(t, kv, replica)
		return ok && !en.Created().Before(at)
	})
}

// lostConfirms writes this replica's heartbeats but, while lose is set, reports each as failed:
// the heartbeats arrive, so the others would count the replica alive, but it cannot know.
type lostConfirms struct {
	Membership
	lose atomic.Bool
}

func (l *lostConfirms) Heartbeat(ctx context.Context, replica string, value []byte, ttl time.Duration) error {
	err := l.Membership.Heartbeat(ctx, replica, value, ttl)
	if err == nil && l.lose.Load() {
		return errors.New("confirmation lost")
	}
	return err
}

// A replica that has fenced itself while its heartbeats still arrive (their confirmations are
// lost) leaves, so that the other takes its partitions and fires its tasks, instead of counting it
// alive for as long as its heartbeats arrive; once confirmations come back, it joins again.
func TestFencedReplicaLeaves(t *testing.T) {
	t.Parallel()
	e := newPartEnv(t, 60, time.Second)
	lc := &lostConfirms{}
	a := e.start("fa", func(m Membership) Membership { lc.Membership = m; return lc })
	b := e.start("fb", nil)
	e.stable(a, b)
	lc.lose.Store(true)
	lost := time.Now()
	if !checkFor(10*time.Second, func() bool { return len(a.owned()) == 0 && len(b.owned()) == e.n }) {
		t.Fatalf("with its heartbeats unconfirmed, fa owns %d partitions and fb %d", len(a.owned()), len(b.owned()))
	}
	t.Logf("lease 1s: fb owns every partition %v after fa's confirmations began to be lost", time.Since(lost).Round(time.Millisecond))
	ids := e.idsIn("lost", 60, func(int) bool { return true })
	e.create(ids, time.Now().UnixMilli())
	e.settled(ids, 15*time.Second)
	if by := e.once(ids); by["fa"] != 0 {
		t.Errorf("fires by replica %v while fa is fenced; want none by fa", by)
	}
	if value(t, a.b.m.members.fencedLeaves) == 0 {
		t.Error("ax_fenced_leaves_total is 0")
	}
	lc.lose.Store(false)
	e.stable(a, b)
}

// A replica fenced for less than half a lease (its heartbeats' confirmations lost a while, as
// when JetStream is slow) stays a member: it heartbeats, and once one is confirmed it goes on
// with the same partitions, without a leave and a join that would move them away and back.
func TestBrieflyFencedReplicaStays(t *testing.T) {
	t.Parallel()
	// Fenced, the replica must see a heartbeat confirmed within half a lease (4 s), or it leaves.
	e := newPartEnv(t, 60, 8*time.Second)
	lc := &lostConfirms{}
	a := e.start("bfa", func(m Membership) Membership { lc.Membership = m; return lc })
	b := e.start("bfb", nil)
	e.stable(a, b)
	mine := len(a.owned())
	lc.lose.Store(true)
	if !checkFor(2*e.lease, func() bool { return !a.b.alive() }) {
		t.Fatal("with its heartbeats unconfirmed, bfa did not fence itself")
	}
	lc.lose.Store(false)
	if !checkFor(e.lease, a.b.alive) {
		t.Fatal("bfa is still fenced a lease after its heartbeats are confirmed again")
	}
	if v := value(t, a.b.m.members.fencedLeaves); v != 0 {
		t.Errorf("ax_fenced_leaves_total %v after a short fence, want 0", v)
	}
	if n := len(a.owned()); n != mine {
		t.Errorf("bfa owns %d partitions after a short fence, %d before", n, mine)
	}
}

// slowWatch holds WatchMembers back until release is closed, as a slow joiner's load of the
// member view would be; entered is closed when the call comes.
type slowWatch struct {
	Membership
	entered, release chan struct{}
	once             sync.Once
}

func (s *slowWatch) WatchMembers(ctx context.Context) (<-chan kvstore.MemberEvent, error) {
	s.once.Do(func() { close(s.entered) })
	select {
	case <-s.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Membership.WatchMembers(ctx)
}

// A joiner is handed partitions only once it has loaded the member view and subscribed to their
// acks: while its load is slow, the owner keeps every partition, fires the tasks due in those the
// joiner will own and applies the acks of attempts fired there, and every task succeeds on its
// first attempt.
func TestSlowJoinerNotCountedEarly(t *testing.T) {
	t.Parallel()
	e := newPartEnv(t, 60, 4*time.Second)
	e.ack.Store(false)
	a := e.start("sja", nil)
	e.stable(a)
	toB := func(p int) bool { return assign([]string{"sja", "sjb"}, e.n)[p] == "sjb" }
	early := e.idsIn("early", 10, toB)
	e.create(early, time.Now().UnixMilli())
	if !checkFor(10*time.Second, func() bool { return len(e.firesOf(early)) == len(early) }) {
		t.Fatal("the tasks did not fire")
	}
	sw := &slowWatch{entered: make(chan struct{}), release: make(chan struct{})}
	started := make(chan *replica, 1)
	go func() { started <- e.start("sjb", func(m Membership) Membership { sw.Membership = m; return sw }) }()
	select {
	case <-sw.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("sjb did not start loading the members")
	}
	// sjb heartbeats only after its load: while it loads, it has no key, and sja counts it not.
	if en, ok := memberKey(t, membersKV(t, e), "sjb"); ok {
		t.Errorf("while sjb loads the members, its key is in the members bucket (revision %d)", en.Revision())
	}
	if n, live := len(a.owned()), a.b.liveMembers.Load(); n != e.n || live != 1 {
		t.Errorf("while sjb loads the members, sja counts %d members and owns %d partitions; want 1 and all %d", live, n, e.n)
	}
	during := e.idsIn("during", 10, toB)
	e.create(during, time.Now().UnixMilli())
	if !checkFor(10*time.Second, func() bool { return len(e.firesOf(during)) == len(during) }) { // sjb's load is held meanwhile
		t.Errorf("while sjb loads the members, %d of %d tasks due in its partitions-to-be fired", len(e.firesOf(during)), len(during))
	}
	e.mu.Lock()
	held := append([]*nats.Msg(nil), e.hold...)
	e.mu.Unlock()
	for _, m := range held {
		if _, err := e.nc.Request(m.Reply, []byte("+ACK"), 5*time.Second); err != nil {
			t.Errorf("ack of %s while sjb loads the members: %v", m.Header.Get(HeaderTaskID), err)
		}
	}
	close(sw.release)
	var b *replica
	select {
	case b = <-started:
	case <-time.After(15 * time.Second):
		t.Fatal("sjb did not start")
	}
	e.stable(a, b)
	ids := append(early, during...)
	e.settled(ids, 10*time.Second)
	for id, fs := range e.firesOf(ids) {
		if len(fs) != 1 || fs[0].replica != "sja" {
			t.Errorf("task %s fired %+v; want once, by sja", id, fs)
		}
	}
}
