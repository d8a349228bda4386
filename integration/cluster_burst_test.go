package integration

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// clusterBurst is the size of the burst in TestClusterBurstAfterLeaderRestart; AX_CLUSTER_BURST
// runs it larger (the issue saw its loss in a 50k burst).
var clusterBurst = envInt("AX_CLUSTER_BURST", 2_000)

// syncAlways is nats-server's sync_interval: always: every JetStream write is an fsync.
func syncAlways(o *server.Options) { o.SyncAlways = true }

// Issue 14 item 8: on a 3-node cluster with sync_interval: always, the node that leads the bucket's
// stream is shut down and restarted while the bridge keeps running; then a burst of tasks, all due
// at one instant that has already passed when their records are written, is scheduled. Every task
// must fire at least once, none before its Ax-Due-At, and none may be left WAITING in the bucket.
//
// The bridge's watch is an R1 ordered consumer that the server places on any replica of the
// stream. The test makes sure it sits on a follower during the burst (stepping the stream's
// leader down where needed), the case in which the watch can deliver a record before the leader
// has applied it, and a claim at that record's revision is refused as "busy" (10164): taken for a
// conflict, that left 404 of 50,000 tasks WAITING for good.
func TestClusterBurstAfterLeaderRestart(t *testing.T) {
	t.Parallel()
	c := natstest.RunCluster(t, 3, syncAlways)
	storeCfg := kvstore.Config{Replicas: 3}
	e := newEnvOn(t, c.ClientURLs(), storeCfg)
	e.startBridgeOn(c.ClientURLs(), storeCfg, bridge.Config{ReplicaID: "burst", StreamReplicas: 3})
	fires := e.recordFires("ax.fire.burst")

	stream := "KV_" + kvstore.DefaultBucket
	e.watchOffLeader(c, stream) // so the restart below leaves the watch where it is
	leader := streamLeader(t, c, stream)
	t.Logf("restarting %s, the leader of %s", leader.NATS().Name(), stream)
	leader.Restart(t)
	e.watchOffLeader(c, stream)
	// Every node must know of the consumer again, or a fire meets no responders and is retried
	// after its backoff (correctly, but past the end of this test).
	if !checkFor(20*time.Second, func() bool {
		for _, s := range c.Servers {
			if !s.NATS().GlobalAccount().SubscriptionInterest("ax.fire.burst") {
				return false
			}
		}
		return true
	}) {
		t.Fatal("consumer interest did not reach every node after the restart")
	}

	// One due instant, 5 s before the first schedule is even published: every record is written
	// after its due time, as when intake runs late.
	due := time.Now().Add(-5 * time.Second).Truncate(time.Millisecond)
	ids := make([]string, clusterBurst)
	for i := range ids {
		ids[i] = "burst-" + strconv.Itoa(i)
	}
	e.publishBurst(ids, func(id string, h nats.Header) {
		h.Set(bridge.HeaderTaskID, id)
		h.Set(bridge.HeaderDeliverAt, strconv.FormatInt(due.UnixMilli(), 10))
	})

	checkFor(60*time.Second, func() bool { return fires.distinct() == len(ids) })
	records := e.readRecords(ids)
	byStatus := map[kvstore.Status]int{}
	for _, r := range records {
		byStatus[r.Task.Status]++
	}
	t.Logf("burst of %d: %d fired, records by status %v", len(ids), fires.distinct(), byStatus)
	// A task can be WAITING past due for a moment (a retry that just came due); a stuck one stays.
	overdue := waitingPastDue(records)
	checkFor(15*time.Second, func() bool {
		overdue = waitingPastDue(e.readRecords(overdue))
		return len(overdue) == 0
	})
	if len(overdue) > 0 {
		t.Errorf("%d tasks still WAITING past due, e.g. %v", len(overdue), overdue[:min(len(overdue), 5)])
	}
	if missing := fires.missing(ids); len(missing) > 0 {
		t.Errorf("%d tasks never fired, e.g. %v", len(missing), missing[:min(len(missing), 5)])
	}
	if n := fires.earlyCount(); n > 0 {
		t.Errorf("%d fires arrived before their Ax-Due-At", n)
	}
}

// watchOffLeader waits until the bucket stream has a leader and the bridge's watch consumer (the
// stream's only consumer) a server, and steps the stream's leader down while that is the same
// server.
func (e *env) watchOffLeader(c *natstest.Cluster, stream string) {
	e.t.Helper()
	t := e.t
	for range 5 {
		var host string
		if !checkFor(30*time.Second, func() bool {
			host = watchHost(e.js, stream)
			return host != ""
		}) {
			t.Fatalf("no watch consumer on %s within 30s", stream)
		}
		leader := streamLeader(t, c, stream).NATS().Name()
		if leader != host {
			t.Logf("watch consumer on %s, stream leader %s", host, leader)
			return
		}
		// $JS.API.STREAM.LEADER.STEPDOWN.<stream>: the leader hands over to another replica.
		if _, err := e.nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil, 5*time.Second); err != nil {
			t.Logf("step down %s: %v", stream, err)
		}
		checkFor(10*time.Second, func() bool {
			l := currentLeader(c, stream)
			return l != nil && l.NATS().Name() != leader
		})
	}
	t.Fatalf("the watch consumer of %s stayed on the stream's leader", stream)
}

// watchHost is the server that hosts the stream's one consumer, or "" while there is none (or
// more than one).
func watchHost(js jetstream.JetStream, stream string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return ""
	}
	var hosts []string
	for ci := range s.ListConsumers(ctx).Info() {
		if ci.Cluster != nil {
			hosts = append(hosts, ci.Cluster.Leader)
		}
	}
	if len(hosts) != 1 {
		return ""
	}
	return hosts[0]
}

// currentLeader is the server that leads the stream, or nil.
func currentLeader(c *natstest.Cluster, stream string) *natstest.Server {
	for _, s := range c.Servers {
		if s.NATS().JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return s
		}
	}
	return nil
}

// streamLeader waits until one of the cluster's servers leads the stream and returns it.
func streamLeader(t testing.TB, c *natstest.Cluster, stream string) *natstest.Server {
	t.Helper()
	var leader *natstest.Server
	if !checkFor(20*time.Second, func() bool {
		leader = currentLeader(c, stream)
		return leader != nil
	}) {
		t.Fatalf("no leader for stream %s within 20s", stream)
	}
	return leader
}

// publishBurst publishes one schedule message per id with pipelined JetStream publishes that ride
// out a stream without a leader, and returns once the stream holds every one of them.
func (e *env) publishBurst(ids []string, hdr func(id string, h nats.Header)) {
	e.t.Helper()
	js, err := jetstream.New(e.nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		e.t.Fatal(err)
	}
	retry := []jetstream.PublishOpt{jetstream.WithRetryWait(50 * time.Millisecond), jetstream.WithRetryAttempts(200)}
	msg := func(id string) *nats.Msg {
		m := nats.NewMsg(bridge.SchedulePrefix + "burst")
		m.Data = []byte(id)
		hdr(id, m.Header)
		return m
	}
	futures := make([]jetstream.PubAckFuture, len(ids))
	for i, id := range ids {
		opts := append(retry, jetstream.WithStallWait(time.Minute))
		if futures[i], err = js.PublishMsgAsync(msg(id), opts...); err != nil {
			e.t.Fatalf("publish %s: %v", id, err)
		}
	}
	for i, f := range futures {
		select {
		case <-f.Ok():
			continue
		case err = <-f.Err():
		case <-time.After(time.Minute):
			err = fmt.Errorf("no stream ack within 1m")
		}
		// Published again: the task id makes a repeat a duplicate of the same task.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err2 := js.PublishMsg(ctx, msg(ids[i]), retry...)
		cancel()
		if err2 != nil {
			e.t.Fatalf("publish %s: %v, then %v", ids[i], err, err2)
		}
	}
}

// fireRecord keeps every fire a consumer received, acking each one.
type fireRecord struct {
	mu    sync.Mutex
	seen  map[string]int // task id -> fires received
	early int            // fires received before their Ax-Due-At
}

func (e *env) recordFires(subject string) *fireRecord {
	e.t.Helper()
	r := &fireRecord{seen: map[string]int{}}
	sub, err := e.nc.Subscribe(subject, func(m *nats.Msg) {
		now := time.Now()
		d, err := time.Parse(time.RFC3339Nano, m.Header.Get(bridge.HeaderDueAt))
		r.mu.Lock()
		r.seen[m.Header.Get(bridge.HeaderTaskID)]++
		if err != nil || now.Before(d) {
			r.early++
		}
		r.mu.Unlock()
		_ = m.Ack()
	})
	if err != nil {
		e.t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.nc.Flush(); err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (r *fireRecord) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

func (r *fireRecord) earlyCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.early
}

func (r *fireRecord) missing(ids []string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, id := range ids {
		if r.seen[id] == 0 {
			out = append(out, id)
		}
	}
	return out
}

// waitingPastDue is the ids of the records that are WAITING and due.
func waitingPastDue(records map[string]kvstore.Entry) []string {
	now := time.Now().UnixMilli()
	var ids []string
	for id, r := range records {
		if r.Task.Status == kvstore.StatusWaiting && r.Task.DueAt <= now {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// readRecords reads the record of every id from the stream leader, a few reads at a time.
func (e *env) readRecords(ids []string) map[string]kvstore.Entry {
	e.t.Helper()
	const readers = 8
	var mu sync.Mutex
	out := make(map[string]kvstore.Entry, len(ids))
	var wg sync.WaitGroup
	for r := range readers {
		wg.Go(func() {
			for i := r; i < len(ids); i += readers {
				ent, err := e.store.Get(context.Background(), ids[i])
				if err != nil {
					e.t.Errorf("read task %s: %v", ids[i], err)
					continue
				}
				mu.Lock()
				out[ids[i]] = ent
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out
}
