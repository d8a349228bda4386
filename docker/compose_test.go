//go:build docker

// Package docker holds the compose test: compose.yaml brought up for real (3 NATS nodes, two
// bridges), faults injected with the Docker CLI while a few thousand tasks fire. It needs a
// Docker daemon and docker-compose, and fails without them:
//
//	go test -tags docker -count=1 -timeout 30m ./docker/
package docker

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/scrape"
	"github.com/axbridge/axbridge/kvstore"
)

const (
	bizType   = "order"          // the bizType nats/auth.conf scopes the producer and consumer to
	upfront   = 2000             // tasks scheduled at the start, due over the next minute
	steady    = 1000             // tasks scheduled while the faults go on, due within seconds
	spread    = 60 * time.Second // due times of the upfront tasks: from firstDue to firstDue+spread
	firstDue  = 5 * time.Second
	ackWait   = 5 * time.Second // Ax-Ack-Wait of every task: the lease
	leaseSkew = time.Second     // the bridge's default --lease-skew
	nakEvery  = 20              // the consumer refuses attempt 1 of one task in 20
)

// While 3,000 tasks are pending and firing, the KV stream's leader node is stopped and started
// again, a bridge is cut off the network for two leases and reconnected, and the other bridge is
// restarted. Every accepted task fires, none early, no attempt twice; repeats carry a higher
// attempt and follow a fault (or the consumer's own -NAK); at the end no record is WAITING past
// due or RUNNING past its lease: every one is SUCCESS. (See judge for the one ordering a network
// cut allows.)
func TestComposeFaults(t *testing.T) {
	requireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	s := newStack(t)
	s.build(ctx)
	s.up(ctx)
	t.Logf("stack %s up", s.project)

	// Each party connects as its role in nats/auth.conf, with the role's inbox prefix
	// (permissions.md); the bridge's role reads the bucket at the end.
	var asyncErrs errorLog
	connect := func(user string) *nats.Conn {
		opts := []nats.Option{nats.UserInfo(user, s.passwords[user]), nats.Name("compose-test-" + user),
			nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond), nats.PingInterval(2 * time.Second),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { asyncErrs.add(user, err) })}
		if user != "bridge" {
			opts = append(opts, nats.CustomInboxPrefix("_INBOX_"+user))
		}
		nc, err := nats.Connect(s.natsURLs(), opts...)
		if err != nil {
			t.Fatalf("connect as %s: %v", user, err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	rec := newRecorder(nakEvery)
	for range 2 { // two consumer connections in one queue group, as a service runs them
		nc := connect("consumer")
		if _, err := nc.QueueSubscribe("ax.fire."+bizType, "workers", rec.onFire); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	js, err := jetstream.New(connect("producer"))
	if err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	var ids []string
	for i := range upfront {
		ids = append(ids, fmt.Sprintf("up-%05d", i))
	}
	schedule(ctx, t, js, ids, func(i int) time.Time { return t0.Add(firstDue + time.Duration(i)*spread/upfront) })
	t.Logf("%d tasks scheduled in %v", upfront, time.Since(t0).Round(time.Millisecond))

	// The steady publisher: one task every 50ms for 50s, each due 0-3s after it was sent.
	// A failing test stops it (and waits for it) before the stack goes down.
	var steadyIDs []string
	var wg sync.WaitGroup
	sctx, stopSteady := context.WithCancel(ctx)
	t.Cleanup(func() { stopSteady(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := range steady {
			select {
			case <-tick.C:
			case <-sctx.Done():
				return
			}
			id := fmt.Sprintf("st-%05d", i)
			steadyIDs = append(steadyIDs, id)
			schedule(sctx, t, js, []string{id}, func(int) time.Time { return time.Now().Add(time.Duration(i%31) * 100 * time.Millisecond) })
		}
	}()

	var faults []fault
	inject := func(at time.Duration, name string, do, undo func() error, hold time.Duration) {
		if d := time.Until(t0.Add(at)); d > 0 {
			<-time.After(d) // the fault timeline, not a wait for a condition
		}
		f := fault{name: name, start: time.Now()}
		if err := do(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		<-time.After(hold) // how long the fault lasts
		if err := undo(); err != nil {
			t.Fatalf("undo %s: %v", name, err)
		}
		f.healed = time.Now()
		took, err := s.waitHealthy(ctx, 3*time.Minute)
		if err != nil {
			t.Fatalf("after %s: %v", name, err)
		}
		f.recovered = f.healed.Add(took)
		t.Logf("fault %s: %s → healed %s → healthy %s (last to recover: %s)", name, f.start.Format(time.StampMilli),
			f.healed.Format(time.StampMilli), f.recovered.Format(time.StampMilli), cmp.Or(s.lastUnhealthy, "none was down"))
		faults = append(faults, f)
	}

	leader, err := s.streamLeader(ctx, "KV_AX_TASKS")
	if err != nil {
		t.Fatal(err)
	}
	leaderID, err := s.container(ctx, leader)
	if err != nil {
		t.Fatal(err)
	}
	inject(8*time.Second, "stop "+leader+" (KV leader)",
		func() error { return s.run(ctx, "stop", "-t", "10", leaderID) },
		func() error { return s.run(ctx, "start", leaderID) }, 10*time.Second)

	b1, err := s.container(ctx, "bridge-1")
	if err != nil {
		t.Fatal(err)
	}
	inject(28*time.Second, "disconnect bridge-1",
		func() error { return s.run(ctx, "network", "disconnect", s.network(), b1) },
		func() error { return s.run(ctx, "network", "connect", "--alias", "bridge-1", s.network(), b1) },
		2*ackWait+time.Second)

	b2, err := s.container(ctx, "bridge-2")
	if err != nil {
		t.Fatal(err)
	}
	inject(48*time.Second, "restart bridge-2",
		func() error { return s.run(ctx, "restart", "-t", "35", b2) },
		func() error { return nil }, 0)
	wg.Wait()
	all := append(ids, steadyIDs...)

	// Wait (bounded) until every task has fired and its record is final.
	nc := connect("bridge")
	bjs, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := kvstore.OpenJetStore(ctx, bjs, kvstore.Config{Bucket: "AX_TASKS", Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	var records map[string]kvstore.Entry
	settled := func() bool {
		records, err = readAll(ctx, store, all)
		if err != nil {
			t.Logf("read bucket: %v", err)
			return false
		}
		final := 0
		for _, en := range records {
			if en.Task.Status.Final() {
				final++
			}
		}
		return final == len(all) && rec.seen(all) == len(all)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for !settled() && time.Now().Before(deadline) {
		<-time.After(time.Second) // poll interval of a bounded poll
	}
	now := time.Now()
	v := rec.judge(all, faults, ackWait+leaseSkew, records, now)
	t.Logf("compose test, %s:\n%s", time.Since(t0).Round(time.Second), v.summary(faults, t0))

	report := func(what string, list []string) {
		if len(list) > 0 {
			t.Errorf("%d %s, e.g. %s", len(list), what, strings.Join(list[:min(len(list), 5)], "; "))
		}
	}
	report("tasks never fired (lost)", v.lost)
	report("fires before Ax-Due-At", v.early)
	report("attempts received twice", v.sameAttempt)
	report("earlier attempts received after a later one, outside any fault", v.lowerAttempt)
	report("repeats no fault or nak explains", v.unexplained)
	report("records WAITING past due, RUNNING past lease, or not final", v.badRecords)
	if v.statuses[kvstore.StatusSuccess] != len(all) {
		t.Errorf("final statuses %v, want all %d SUCCESS", v.statuses, len(all))
	}
	for _, e := range asyncErrs.all() {
		if strings.Contains(strings.ToLower(e), "permissions violation") {
			t.Errorf("refused by the roles of nats/auth.conf: %s", e)
		} else {
			t.Logf("asynchronous client error: %s", e)
		}
	}
	if v.repeats["nak"] == 0 {
		t.Errorf("no retry after a -NAK was seen: the consumer's refusals did not reach the bridge")
	}
	// The repeats the faults caused (a -NAK's retry is the consumer's choice) stay within 1%.
	byFault := len(v.unexplained)
	for cause, n := range v.repeats {
		if cause != "nak" {
			byFault += n
		}
	}
	if byFault*100 > len(all) {
		t.Errorf("%d repeats after faults among %d tasks, over the bar of 1%% (%v)", byFault, len(all), v.repeats)
	}
	s.checkBridges(ctx)
}

// repairLine is what the reconciler logs for each repair (bridge/reconcile.go).
const repairLine = "reconciler: task was not indexed in time"

// checkBridges fails the test if a bridge's reconciler repaired a task (a lost watch event: the
// README calls any repair a bug), over the container's whole log (restarts included) and its
// live ax_reconcile_repairs_total, or if a bridge logged a panic or a fatal error.
func (s *stack) checkBridges(ctx context.Context) {
	t := s.t
	t.Helper()
	for _, svc := range []string{"bridge-1", "bridge-2"} {
		id, err := s.container(ctx, svc)
		if err != nil {
			t.Errorf("%s: %v", svc, err)
			continue
		}
		logs, err := s.docker(ctx, "logs", id)
		if err != nil {
			t.Errorf("docker logs %s: %v", svc, err)
			continue
		}
		if n := strings.Count(logs, repairLine); n > 0 {
			t.Errorf("%s: the reconciler repaired %d tasks", svc, n)
		}
		for _, bad := range []string{"panic: ", "fatal error: "} {
			if i := strings.Index(logs, bad); i >= 0 {
				t.Errorf("%s logged %q:\n%s", svc, bad, logs[i:min(len(logs), i+2000)])
			}
		}
		n, err := s.repairs(ctx, svc)
		switch {
		case err != nil:
			t.Errorf("%s: %v", svc, err)
		case n != 0:
			t.Errorf("%s: ax_reconcile_repairs_total %v, want 0", svc, n)
		}
	}
}

// repairs is the sum of the bridge service's ax_reconcile_repairs_total samples (both kinds show
// from the start: no sample is an error).
func (s *stack) repairs(ctx context.Context, svc string) (float64, error) {
	return scrape.Sum(ctx, fmt.Sprintf("http://127.0.0.1:%d/metrics", s.metricsPorts[svc]), "ax_reconcile_repairs_total")
}

// schedule publishes one task per id with a due time from due(i), retrying each until the stream
// accepts it (a retry repeats the task id, so the bridge takes it once).
func schedule(ctx context.Context, t *testing.T, js jetstream.JetStream, ids []string, due func(i int) time.Time) {
	msgs := make([]*nats.Msg, len(ids))
	futures := make([]jetstream.PubAckFuture, len(ids))
	for i, id := range ids {
		m := nats.NewMsg("ax.schedule." + bizType)
		m.Header.Set("Ax-Task-Id", id)
		m.Header.Set("Ax-Deliver-At", strconv.FormatInt(due(i).UnixMilli(), 10))
		m.Header.Set("Ax-Ack-Wait", ackWait.String())
		m.Header.Set("Ax-Backoff", "1s")
		m.Header.Set("Ax-Max-Retry", "20")
		m.Data = []byte(`{"id":"` + id + `"}`)
		msgs[i] = m
		futures[i], _ = js.PublishMsgAsync(m)
	}
	for i, f := range futures {
		ok := false
		if f != nil {
			select {
			case <-f.Ok():
				ok = true
			case <-f.Err():
			case <-time.After(10 * time.Second):
			}
		}
		for attempt := 0; !ok; attempt++ {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := js.PublishMsg(pctx, msgs[i])
			cancel()
			if ok = err == nil; ok {
				break
			}
			if attempt == 100 || ctx.Err() != nil {
				t.Errorf("schedule %s: %v", ids[i], err)
				return
			}
			<-time.After(100 * time.Millisecond) // a pause between publish retries
		}
	}
}

// readAll reads the records of ids.
func readAll(ctx context.Context, store *kvstore.JetStore, ids []string) (map[string]kvstore.Entry, error) {
	out := make(map[string]kvstore.Entry, len(ids))
	for start := 0; start < len(ids); start += 500 {
		ens, err := store.GetMany(ctx, ids[start:min(len(ids), start+500)])
		if err != nil {
			return nil, err
		}
		for _, en := range ens {
			out[en.Task.ID] = en
		}
	}
	return out, nil
}

func (s *stack) run(ctx context.Context, args ...string) error {
	out, err := s.docker(ctx, args...)
	if err != nil {
		return fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// errorLog keeps the asynchronous errors of the test's own connections.
type errorLog struct {
	mu   sync.Mutex
	errs []string
}

func (l *errorLog) add(user string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, user+": "+err.Error())
}

func (l *errorLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.errs)
}
