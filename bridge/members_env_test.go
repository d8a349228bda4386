package bridge

import (
	"context"
	"fmt"
	"log/slog"
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
