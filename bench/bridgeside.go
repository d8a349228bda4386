package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/kvstore"
)

// The bridge side: one bridge in this process, as cmd/axbridge runs it, on its own connection;
// the client (publisher and consumer) on another.
const (
	bridgeStream   = "AX_SCHEDULE"
	bridgeConsumer = "axbridge"
	bridgeBucket   = "AX_TASKS"
)

// bridgeSide is the client's connection and one running bridge.
type bridgeSide struct {
	nc     *nats.Conn // the client's
	js     jetstream.JetStream
	srv    *serverSet
	b      *bridge.Bridge
	bnc    *nats.Conn // the bridge's
	store  *kvstore.JetStore
	reg    *prometheus.Registry
	claims *claimCounter // on the first bridge's store
	// more are bridges 2..N of --bridges N, each as the first: own connection, store, registry.
	more     []*replicaSide
	rejected atomic.Int64 // schedule messages refused (ax.rejected.>): never stored, so lost
	// duplicates counts ax.duplicate.> events: a schedule message whose task is already stored
	// (here: a redelivery of the intake stream), so not lost; reported as a note.
	duplicates atomic.Int64
	subs       []*nats.Subscription
}

// openBridge connects a client, starts a bridge and waits (a minute at most) until it is ready.
func (r *runner) openBridge(ctx context.Context, srv *serverSet) (*bridgeSide, error) {
	nc, err := connect(srv.url(), "bench-client")
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	s := &bridgeSide{nc: nc, js: js, srv: srv}
	for subj, n := range map[string]*atomic.Int64{bridge.RejectedPrefix + ">": &s.rejected, bridge.DuplicatePrefix + ">": &s.duplicates} {
		sub, err := nc.Subscribe(subj, func(*nats.Msg) { n.Add(1) })
		if err != nil {
			s.close()
			return nil, err
		}
		s.subs = append(s.subs, sub)
	}
	if err := r.startBridge(ctx, s); err != nil {
		s.close()
		return nil, err
	}
	if err := r.ready(ctx, s, time.Minute); err != nil {
		s.close()
		return nil, err
	}
	// --bridges N: the others start once the first has created the stream and bucket.
	for i := 1; i < r.o.bridges; i++ {
		rs, err := r.startReplica(ctx, srv, "bench-"+strconv.Itoa(i+1))
		if err != nil {
			s.close()
			return nil, err
		}
		s.more = append(s.more, rs)
		if err := waitReady(ctx, rs.b, time.Minute); err != nil {
			s.close()
			return nil, err
		}
	}
	return s, nil
}

// replicaSide is one more bridge of --bridges N on its own connection, store and registry.
type replicaSide struct {
	b      *bridge.Bridge
	nc     *nats.Conn
	store  *kvstore.JetStore
	reg    *prometheus.Registry
	claims *claimCounter
}

// startReplica starts one more bridge, named id, as startBridge starts the first.
func (r *runner) startReplica(ctx context.Context, srv *serverSet, id string) (*replicaSide, error) {
	s := &bridgeSide{srv: srv}
	if err := r.startBridgeNamed(ctx, s, id); err != nil {
		return nil, err
	}
	return &replicaSide{b: s.b, nc: s.bnc, store: s.store, reg: s.reg, claims: s.claims}, nil
}

func (rs *replicaSide) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = rs.b.Stop(ctx)
	_ = rs.store.Close()
	rs.nc.Close()
}

// registries are every running bridge's metrics registry, the first bridge's first.
func (s *bridgeSide) registries() []*prometheus.Registry {
	regs := []*prometheus.Registry{s.reg}
	for _, rs := range s.more {
		regs = append(regs, rs.reg)
	}
	return regs
}

// claimCounters are every running bridge's claim counter, the first bridge's first.
func (s *bridgeSide) claimCounters() []*claimCounter {
	cs := []*claimCounter{s.claims}
	for _, rs := range s.more {
		cs = append(cs, rs.claims)
	}
	return cs
}

// startBridge opens the bucket and starts a bridge on its own connection (not waiting for Ready).
func (r *runner) startBridge(ctx context.Context, s *bridgeSide) error {
	return r.startBridgeNamed(ctx, s, "bench")
}

// startBridgeNamed is startBridge with the replica id id.
func (r *runner) startBridgeNamed(ctx context.Context, s *bridgeSide, id string) error {
	bnc, err := connect(s.srv.url(), "bench-bridge")
	if err != nil {
		return err
	}
	bjs, err := jetstream.New(bnc)
	if err != nil {
		bnc.Close()
		return err
	}
	var store *kvstore.JetStore
	// A fresh cluster may not place an R3 bucket at once: retry briefly.
	if err := retry(ctx, 30*time.Second, 100*time.Millisecond, func(ctx context.Context) (err error) {
		store, err = kvstore.OpenJetStore(ctx, bjs, kvstore.Config{Bucket: bridgeBucket, Replicas: s.srv.replicas(), BatchMax: r.o.writeBatch})
		return err
	}); err != nil {
		bnc.Close()
		return fmt.Errorf("open bucket: %w", err)
	}
	reg := prometheus.NewRegistry()
	claims := &claimCounter{JetStore: store}
	b, err := bridge.New(bnc, claims, bridge.Config{
		ReplicaID: id, Stream: bridgeStream, StreamReplicas: s.srv.replicas(), NoAckLog: r.o.noAckLog,
		MaxClaims: r.o.maxClaims,
		Logger:    r.log, Registerer: reg,
	})
	if err != nil {
		_ = store.Close()
		bnc.Close()
		return err
	}
	if err := b.Start(ctx); err != nil {
		_ = store.Close()
		bnc.Close()
		return fmt.Errorf("start bridge: %w", err)
	}
	s.b, s.bnc, s.store, s.reg, s.claims = b, bnc, store, reg, claims
	return nil
}

// stopBridge stops the running bridge and closes its connection.
func (s *bridgeSide) stopBridge() {
	if s.b == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = s.b.Stop(ctx)
	_ = s.store.Close()
	s.bnc.Close()
	s.b, s.bnc, s.store, s.reg, s.claims = nil, nil, nil, nil, nil
	for _, rs := range s.more {
		rs.stop()
	}
	s.more = nil
}

// account adds the side's rejections to x's lost tasks and notes its duplicate reports.
func (s *bridgeSide) account(x *result) {
	x.lost += int(s.rejected.Load())
	if d := s.duplicates.Load(); d > 0 {
		x.notes = append(x.notes, fmt.Sprintf("%d schedule messages reported on ax.duplicate (an intake redelivery of a task already stored: not lost)", d))
	}
}

func (s *bridgeSide) close() {
	s.stopBridge()
	for _, sub := range s.subs {
		_ = sub.Unsubscribe()
	}
	s.nc.Close()
}

// ready waits for the bridge's Ready.
func (r *runner) ready(ctx context.Context, s *bridgeSide, within time.Duration) error {
	return waitReady(ctx, s.b, within)
}

// waitReady waits for b's Ready.
func waitReady(ctx context.Context, b *bridge.Bridge, within time.Duration) error {
	select {
	case <-b.Ready():
		return nil
	case <-time.After(within):
		return fmt.Errorf("bridge not ready within %v", within)
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// intakeLeft is how many schedule messages the intake consumer has not settled yet: not yet
// delivered (pending) or delivered and not acked (ack pending); -1 on error.
func (s *bridgeSide) intakeLeft(ctx context.Context) int64 {
	cons, err := s.js.Consumer(ctx, bridgeStream, bridgeConsumer)
	if err != nil {
		return -1
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return -1
	}
	return int64(info.NumPending) + int64(info.NumAckPending)
}

// waitStored waits until the intake consumer has no pending and no ack-pending message: the
// bridge acks a schedule message only once its record is durable, so every message is then a
// stored task (or was refused). The stream itself is purged later (limits retention).
func (r *runner) waitStored(ctx context.Context, s *bridgeSide, within time.Duration) error {
	var left atomic.Int64
	return r.waitFor(ctx, "records stored", within, func() bool {
		n := s.intakeLeft(ctx)
		left.Store(n)
		return n == 0
	}, func() string {
		return fmt.Sprintf("%d schedule messages not yet acked by the intake consumer", left.Load())
	})
}

// schedule is the schedule message of task <biz>-<i>; set adds the timing headers.
func bridgeSchedule(body []byte, biz string, i int, set func(h nats.Header)) *nats.Msg {
	m := nats.NewMsg(bridge.SchedulePrefix + biz)
	m.Data = body
	m.Header.Set(bridge.HeaderTaskID, biz+"-"+strconv.Itoa(i))
	set(m.Header)
	return m
}

// consume subscribes to ax.fire.<biz>, records each fire in f, then acks it: as a request
// (AckSync) if acked is not nil, which counts the bridge's replies (one per ack once it is
// durable), else with a plain reply.
func (s *bridgeSide) consume(biz string, f *fires, meant func(id string) time.Time, acked *atomic.Int64, lastAck *atomic.Int64) error {
	var inbox string
	if acked != nil {
		inbox = s.nc.NewRespInbox()
		sub, err := s.nc.Subscribe(inbox, func(*nats.Msg) {
			acked.Add(1)
			lastAck.Store(time.Now().UnixNano())
		})
		if err != nil {
			return err
		}
		_ = sub.SetPendingLimits(-1, -1)
		s.subs = append(s.subs, sub)
	}
	sub, err := s.nc.Subscribe(bridge.FirePrefix+biz, func(m *nats.Msg) {
		now := time.Now()
		id := m.Header.Get(bridge.HeaderTaskID)
		due, _ := time.Parse(time.RFC3339Nano, m.Header.Get(bridge.HeaderDueAt))
		var mt time.Time
		if meant != nil {
			mt = meant(id)
		}
		f.add(id, now, due, mt)
		if acked != nil {
			_ = s.nc.PublishRequest(m.Reply, inbox, nil)
		} else {
			_ = m.Respond(nil)
		}
	})
	if err != nil {
		return err
	}
	_ = sub.SetPendingLimits(-1, -1)
	s.subs = append(s.subs, sub)
	return s.nc.Flush()
}

func (r *runner) bridgeIntake(ctx context.Context, srv *serverSet, x *result) error {
	s, err := r.openBridge(ctx, srv)
	if err != nil {
		return err
	}
	defer s.close()
	f := newFires()
	if err := s.consume("far", f, nil, nil, nil); err != nil {
		return err
	}
	start := time.Now()
	if err := publishAll(ctx, r.p, "publish", s.nc, r.o.intake, func(i int) *nats.Msg {
		return bridgeSchedule(r.payload, "far", i, func(h nats.Header) { h.Set(bridge.HeaderDelay, strconv.Itoa(3600_000+i)) })
	}); err != nil {
		return err
	}
	x.vals["intake_accepted"] = float64(r.o.intake) / time.Since(start).Seconds()
	if err := r.waitStored(ctx, s, 10*time.Minute); err != nil {
		return err
	}
	x.vals["intake_stored"] = float64(r.o.intake) / time.Since(start).Seconds()
	x.early = f.distinct()
	s.account(x)
	return nil
}

func (r *runner) bridgeSpread(ctx context.Context, srv *serverSet, x *result) error {
	s, err := r.openBridge(ctx, srv)
	if err != nil {
		return err
	}
	defer s.close()
	total := r.o.spread
	var mu sync.Mutex
	meant := make(map[string]time.Time, total)
	f := newFires()
	if err := s.consume("spread", f, func(id string) time.Time {
		mu.Lock()
		defer mu.Unlock()
		return meant[id]
	}, nil, nil); err != nil {
		return err
	}
	if err := publishAll(ctx, r.p, "publish", s.nc, total, func(i int) *nats.Msg {
		d := spreadDelay(i, total)
		m := bridgeSchedule(r.payload, "spread", i, func(h nats.Header) { h.Set(bridge.HeaderDelay, strconv.FormatInt(d.Milliseconds(), 10)) })
		mu.Lock()
		meant[m.Header.Get(bridge.HeaderTaskID)] = time.Now().Add(d)
		mu.Unlock()
		return m
	}); err != nil {
		return err
	}
	err = r.waitFor(ctx, "fires", 4*time.Second+2*time.Minute, func() bool { return f.distinct() >= total },
		func() string { return fmt.Sprintf("%d/%d fired", f.distinct(), total) })
	x.lost, x.early = f.check(total)
	s.account(x)
	if err != nil {
		return err
	}
	spreadValues(x, f)
	s.claimValues(x, "spread_conflicts")
	return nil
}

// claimValues sets key to the claim conflicts of every bridge, with a note of the claims
// written and of the bridges' own claim conflict counters, where they have one.
func (s *bridgeSide) claimValues(x *result, key string) {
	claims, conflicts, failed := claimTotals(s.claimCounters())
	x.vals[key] = float64(conflicts)
	note := fmt.Sprintf("%d bridge(s): %d claims written, %d conflicts, %d failed otherwise (store errors, unknown outcomes)", 1+len(s.more), claims, conflicts, failed)
	if v, ok := claimMetric(s.registries()); ok {
		note += fmt.Sprintf("; the bridges' ax_claim*conflicts_total: %.0f", v)
	}
	x.notes = append(x.notes, note)
}

func (r *runner) bridgeBurst(ctx context.Context, srv *serverSet, x *result) error {
	s, err := r.openBridge(ctx, srv)
	if err != nil {
		return err
	}
	defer s.close()
	total := r.o.burst
	f := newFires()
	var acked, lastAck atomic.Int64
	if err := s.consume("burst", f, nil, &acked, &lastAck); err != nil {
		return err
	}
	before, err := totals(ctx, s.js)
	if err != nil {
		return err
	}
	lead := r.burstLead("bridge")
	due := time.Now().Add(lead).Truncate(time.Millisecond)
	dueMs := strconv.FormatInt(due.UnixMilli(), 10)
	if err := publishAll(ctx, r.p, "publish", s.nc, total, func(i int) *nats.Msg {
		return bridgeSchedule(r.payload, "burst", i, func(h nats.Header) { h.Set(bridge.HeaderDeliverAt, dueMs) })
	}); err != nil {
		return err
	}
	if err := r.waitStored(ctx, s, time.Until(due)); err != nil {
		return fmt.Errorf("records not all stored before the due instant: raise --lead (was %v): %w", lead, err)
	}
	r.p.say("all stored; due in %v", time.Until(due).Truncate(time.Millisecond))
	ws0 := s.store.WriteStats()
	stopProfile, err := r.profileFrom(ctx, srv, due, r.o.burstProf)
	if err != nil {
		return err
	}
	err = r.waitFor(ctx, "fires and acks", time.Until(due)+10*time.Minute, func() bool { return acked.Load() >= int64(total) },
		func() string { return fmt.Sprintf("%d/%d fired, %d acks applied", f.distinct(), total, acked.Load()) })
	stopProfile()
	x.lost, x.early = f.check(total)
	s.account(x)
	if err != nil {
		return err
	}
	after, err := totals(ctx, s.js)
	if err != nil {
		return err
	}
	burstValues(x, total, f.lastAt().Sub(due), time.Unix(0, lastAck.Load()).Sub(due), before, after)
	s.claimValues(x, "burst_conflicts")
	x.notes = append(x.notes, writeStatsNote(ws0, s.store.WriteStats()))
	return nil
}

// writeStatsNote says how the bridge's store sent its writes between two readings.
func writeStatsNote(a, b kvstore.WriteStats) string {
	batched, singles := b.BatchedWrites-a.BatchedWrites, b.Singles-a.Singles
	return fmt.Sprintf("the bridge's store sent %d writes: %d in %d atomic batches, %d on their own",
		batched+singles, batched, b.Batches-a.Batches, singles)
}
