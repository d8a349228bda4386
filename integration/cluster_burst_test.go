package integration

import (
	"context"
	"fmt"
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
var clusterBurst = envInt("AX_CLUSTER_BURST", 5_000)

// syncAlways is nats-server's sync_interval: always: every JetStream write is an fsync.
func syncAlways(o *server.Options) { o.SyncAlways = true }

// Issue 14 item 8: on a 3-node cluster with sync_interval: always, the node that leads the bucket's
// stream is shut down and restarted while the bridge keeps running; then a burst of tasks, all due
// at one instant that has already passed when their records are written, is scheduled. Every task
// must fire at least once, none before its Ax-Due-At, and none may be left WAITING in the bucket.
func TestClusterBurstAfterLeaderRestart(t *testing.T) {
	t.Parallel()
	c := natstest.RunCluster(t, 3, syncAlways)
	storeCfg := kvstore.Config{Replicas: 3}
	e := newEnvOn(t, c.ClientURLs(), storeCfg)
	e.startBridgeOn(c.ClientURLs(), storeCfg, bridge.Config{ReplicaID: "burst", StreamReplicas: 3})
	fires := e.recordFires("ax.fire.burst")

	stream := "KV_" + kvstore.DefaultBucket
	leader := streamLeader(t, c, stream)
	t.Logf("restarting %s, the leader of %s", leader.NATS().Name(), stream)
	leader.Restart(t)

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

	if !checkFor(45*time.Second, func() bool { return fires.distinct() == len(ids) }) {
		t.Logf("%d of %d tasks fired within 45s", fires.distinct(), len(ids))
	}
	statuses := e.bucketStatuses(t)
	var waiting []string
	count := map[kvstore.Status]int{}
	for _, id := range ids {
		st, ok := statuses[id]
		if !ok {
			t.Errorf("task %s: no record", id)
			continue
		}
		count[st.Task.Status]++
		if st.Task.Status == kvstore.StatusWaiting {
			waiting = append(waiting, fmt.Sprintf("%s@%d(attempt %d)", id, st.Revision, st.Task.Attempt))
		}
	}
	t.Logf("burst of %d: %d fired, records by status %v", len(ids), fires.distinct(), count)
	if len(waiting) > 0 {
		t.Errorf("%d tasks still WAITING past due, e.g. %v", len(waiting), waiting[:min(len(waiting), 10)])
	}
	for _, id := range fires.missing(ids) {
		t.Errorf("task %s never fired", id)
	}
	if n := fires.earlyCount(); n > 0 {
		t.Errorf("%d fires arrived before their Ax-Due-At", n)
	}
}

// streamLeader waits until one of the cluster's servers leads the stream and returns it.
func streamLeader(t *testing.T, c *natstest.Cluster, stream string) *natstest.Server {
	t.Helper()
	var leader *natstest.Server
	if !checkFor(20*time.Second, func() bool {
		for _, s := range c.Servers {
			if s.NATS().JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
				leader = s
				return true
			}
		}
		return false
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

// bucketStatuses reads every record in the bucket through a watch of its current values.
func (e *env) bucketStatuses(t *testing.T) map[string]kvstore.Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := e.store.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	out := map[string]kvstore.Entry{}
	for ev := range w.Events() {
		switch ev.Kind {
		case kvstore.EventPut:
			out[ev.ID] = ev.Entry
		case kvstore.EventInitDone:
			return out
		}
	}
	t.Fatalf("bucket read ended early: %v", ctx.Err())
	return nil
}
