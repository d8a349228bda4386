package bridge

import (
	"context"
	"errors"
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
		mjs, err := jetstream.New(natstest.Connect(t, e.srv.ClientURL()))
		if err != nil {
			t.Fatal(err)
		}
		a := e.startOn("la", nc, func(Membership) Membership {
			m, err := kvstore.OpenMembers(context.Background(), mjs, kvstore.MembersConfig{Bucket: e.store.Bucket() + "_MEMBERS"})
			if err != nil {
				t.Fatal(err)
			}
			return m
		})
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
		if !checkFor(lease/2, func() bool { return len(b.owned()) == e.n }) {
			t.Fatalf("run %d: half a lease after la's connection went down, lb owns %d partitions", run, len(b.owned()))
		}
		took = append(took, time.Since(cut))
		if len(a.owned()) != 0 {
			t.Errorf("run %d: la still owns %d partitions", run, len(a.owned()))
		}
		// The other takes the partitions once the delete lands; la counts the leave once the
		// delete's answer is back, a moment later.
		if !checkFor(lease/4, func() bool { return value(t, a.b.m.members.fencedLeaves) == 1 }) {
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
	const lease = 8 * time.Second
	e := newPartEnv(t, 60, lease)
	nc := natstest.Connect(t, e.srv.ClientURL(), nats.ReconnectWait(10*time.Millisecond))
	mjs, err := jetstream.New(natstest.Connect(t, e.srv.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	a := e.startOn("ba", nc, func(Membership) Membership {
		m, err := kvstore.OpenMembers(context.Background(), mjs, kvstore.MembersConfig{Bucket: e.store.Bucket() + "_MEMBERS"})
		if err != nil {
			t.Fatal(err)
		}
		return m
	})
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
	if !checkFor(lease/8, func() bool { return nc.Stats().Reconnects > 0 && nc.IsConnected() }) {
		t.Fatal("the connection did not come back within an eighth of the lease")
	}
	time.Sleep(lease / 2) // past the quarter lease after which a replica still cut off leaves
	if v := value(t, a.b.m.members.fencedLeaves); v != 0 {
		t.Errorf("ax_fenced_leaves_total %v after a blip, want 0", v)
	}
	if n := len(a.owned()); n != mine {
		t.Errorf("ba owns %d partitions after a blip, %d before", n, mine)
	}
}

// lostConfirms writes this replica's heartbeats but, while lose is set, reports each as failed:
// the heartbeats arrive, so the others would count the replica alive, but it cannot know.
type lostConfirms struct {
	Membership
	lose atomic.Bool
}

func (l *lostConfirms) Heartbeat(ctx context.Context, replica string, ttl time.Duration) error {
	err := l.Membership.Heartbeat(ctx, replica, ttl)
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
	time.Sleep(500 * time.Millisecond) // time for a heartbeat to arrive, were there one
	if n, live := len(a.owned()), a.b.liveMembers.Load(); n != e.n || live != 1 {
		t.Errorf("while sjb loads the members, sja counts %d members and owns %d partitions; want 1 and all %d", live, n, e.n)
	}
	during := e.idsIn("during", 10, toB)
	e.create(during, time.Now().UnixMilli())
	if !checkFor(e.lease/2, func() bool { return len(e.firesOf(during)) == len(during) }) {
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
