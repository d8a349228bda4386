package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The native side: NATS's own message schedules (nats-server 2.12+), as integration's peer
// benchmarks use them. The stream allows schedules; a message with `Nats-Schedule: @at <RFC 3339>`
// and `Nats-Schedule-Target: <subject>` is a schedule, one per subject (the server rolls a subject
// up to its latest schedule), so each task has its own schedule subject. When due, the server
// stores a copy on the target subject in the same stream and purges the schedule; consumers read
// the target with a JetStream consumer. The timer re-arms no sooner than 250 ms after each pass.
const (
	nativeStream  = "BENCH_NATIVE"
	nativeSchedPf = "native.sched." // schedule subjects: native.sched.<biz>.<i>
	nativeFirePf  = "native.fire."  // targets: native.fire.<biz>
	hdrID         = "Bench-Id"      // our headers, copied onto the fired message
	hdrDue        = "Bench-Due-At"  // the schedule's @at, RFC 3339 with nanoseconds
)

// nativeSide is a connection and the schedule stream on one server set.
type nativeSide struct {
	nc *nats.Conn
	js jetstream.JetStream
	s  jetstream.Stream
}

func (r *runner) openNative(ctx context.Context, srv *serverSet) (*nativeSide, error) {
	nc, err := connect(srv.url(), "bench-native")
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	cfg := jetstream.StreamConfig{
		Name:              nativeStream,
		Subjects:          []string{nativeSchedPf + ">", nativeFirePf + ">"},
		Storage:           jetstream.FileStorage,
		Replicas:          srv.replicas(),
		AllowMsgSchedules: true,
		AllowRollup:       true,
	}
	var s jetstream.Stream
	// A fresh cluster may not place an R3 stream at once: retry briefly.
	if err := retry(ctx, 30*time.Second, 100*time.Millisecond, func(ctx context.Context) (err error) {
		s, err = js.CreateStream(ctx, cfg)
		return err
	}); err != nil {
		nc.Close()
		return nil, fmt.Errorf("create schedule stream: %w", err)
	}
	return &nativeSide{nc: nc, js: js, s: s}, nil
}

func (n *nativeSide) close() { n.nc.Close() }

// schedule is the schedule message of task i of biz, due at due.
func nativeSchedule(body []byte, biz string, i int, due time.Time) *nats.Msg {
	m := nats.NewMsg(nativeSchedPf + biz + "." + strconv.Itoa(i))
	m.Data = body
	at := due.UTC().Format(time.RFC3339Nano)
	m.Header.Set("Nats-Schedule", "@at "+at)
	m.Header.Set("Nats-Schedule-Target", nativeFirePf+biz)
	m.Header.Set(hdrID, strconv.Itoa(i))
	m.Header.Set(hdrDue, at)
	return m
}

// consume reads native.fire.<biz> with a pull consumer that acks each message after handing it,
// with its receive time, to f.
func (n *nativeSide) consume(ctx context.Context, biz string, f *fires, meant func(id string) time.Time) (jetstream.Consumer, func(), error) {
	c, err := n.s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubject: nativeFirePf + biz,
		AckPolicy:     jetstream.AckExplicitPolicy,
		MaxAckPending: -1,
	})
	if err != nil {
		return nil, nil, err
	}
	cc, err := c.Consume(func(m jetstream.Msg) {
		now := time.Now()
		id := m.Headers().Get(hdrID)
		due, _ := time.Parse(time.RFC3339Nano, m.Headers().Get(hdrDue))
		var mt time.Time
		if meant != nil {
			mt = meant(id)
		}
		f.add(id, now, due, mt)
		_ = m.Ack()
	}, jetstream.PullMaxMessages(1000))
	if err != nil {
		return nil, nil, err
	}
	return c, func() { cc.Stop(); <-cc.Closed() }, nil
}

// count is how many messages the stream holds on subject.
func (n *nativeSide) count(ctx context.Context, subject string) (uint64, error) {
	c, err := n.s.CreateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubject: subject, AckPolicy: jetstream.AckNonePolicy, InactiveThreshold: 10 * time.Second,
	})
	if err != nil {
		return 0, err
	}
	defer func() { _ = n.s.DeleteConsumer(context.WithoutCancel(ctx), c.CachedInfo().Name) }()
	return c.CachedInfo().NumPending, nil
}

func (r *runner) nativeIntake(ctx context.Context, srv *serverSet, x *result) error {
	n, err := r.openNative(ctx, srv)
	if err != nil {
		return err
	}
	defer n.close()
	far := time.Now().Add(time.Hour)
	start := time.Now()
	if err := publishAll(ctx, r.p, "publish", n.nc, r.o.intake, func(i int) *nats.Msg {
		return nativeSchedule(r.payload, "far", i, far.Add(time.Duration(i)*time.Millisecond))
	}); err != nil {
		return err
	}
	rate := float64(r.o.intake) / time.Since(start).Seconds()
	x.vals["intake_accepted"], x.vals["intake_stored"] = rate, rate
	return n.checkStored(ctx, x, "far", r.o.intake)
}

// checkStored counts schedules of biz missing from the stream as lost, and fires of biz as early.
func (n *nativeSide) checkStored(ctx context.Context, x *result, biz string, want int) error {
	held, err := n.count(ctx, nativeSchedPf+biz+".>")
	if err != nil {
		return err
	}
	fired, err := n.count(ctx, nativeFirePf+biz)
	if err != nil {
		return err
	}
	x.lost += max(0, want-int(held)-int(fired))
	x.early += int(fired)
	return nil
}

func (r *runner) nativeSpread(ctx context.Context, srv *serverSet, x *result) error {
	n, err := r.openNative(ctx, srv)
	if err != nil {
		return err
	}
	defer n.close()
	f := newFires()
	_, stop, err := n.consume(ctx, "spread", f, nil)
	if err != nil {
		return err
	}
	defer stop()
	total := r.o.spread
	meant := make([]time.Time, total)
	if err := publishAll(ctx, r.p, "publish", n.nc, total, func(i int) *nats.Msg {
		meant[i] = time.Now().Add(spreadDelay(i, total))
		return nativeSchedule(r.payload, "spread", i, meant[i])
	}); err != nil {
		return err
	}
	err = r.waitFor(ctx, "fires", time.Until(meant[total-1])+time.Minute, func() bool { return f.distinct() >= total },
		func() string { return fmt.Sprintf("%d/%d fired", f.distinct(), total) })
	x.lost, x.early = f.check(total)
	if err != nil {
		return err
	}
	// The fired copy carries the @at time itself: both columns are the same figure.
	f.lateClient = f.late
	spreadValues(x, f)
	return nil
}

// spreadDelay is task i's delay of total: spread evenly over 0.5–4 s.
func spreadDelay(i, total int) time.Duration {
	return 500*time.Millisecond + time.Duration(i)*3500*time.Millisecond/time.Duration(total)
}

func spreadValues(x *result, f *fires) {
	if p50, p99, pmax, ok := percentiles(f.late); ok {
		x.vals["spread_p50"], x.vals["spread_p99"], x.vals["spread_max"] = p50, p99, pmax
	}
	if p50, p99, pmax, ok := percentiles(f.lateClient); ok {
		x.vals["spread_client_p50"], x.vals["spread_client_p99"], x.vals["spread_client_max"] = p50, p99, pmax
	}
}

func (r *runner) nativeBurst(ctx context.Context, srv *serverSet, x *result) error {
	n, err := r.openNative(ctx, srv)
	if err != nil {
		return err
	}
	defer n.close()
	f := newFires()
	c, stop, err := n.consume(ctx, "burst", f, nil)
	if err != nil {
		return err
	}
	defer stop()
	total := r.o.burst
	before, err := totals(ctx, n.js)
	if err != nil {
		return err
	}
	due := time.Now().Add(r.burstLead("native")).Truncate(time.Millisecond)
	if err := publishAll(ctx, r.p, "publish", n.nc, total, func(i int) *nats.Msg {
		return nativeSchedule(r.payload, "burst", i, due)
	}); err != nil {
		return err
	}
	if time.Now().After(due) {
		return fmt.Errorf("publishing ran past the due instant: raise --lead (was %v)", r.burstLead("native"))
	}
	r.p.say("all accepted; due in %v", time.Until(due).Truncate(time.Millisecond))
	err = r.waitFor(ctx, "fires", time.Until(due)+10*time.Minute, func() bool { return f.distinct() >= total },
		func() string { return fmt.Sprintf("%d/%d fired", f.distinct(), total) })
	x.lost, x.early = f.check(total)
	if err != nil {
		return err
	}
	fired := f.lastAt().Sub(due)
	var acked time.Duration
	var ackErr error
	if err := r.waitFor(ctx, "acks", 10*time.Minute, func() bool {
		ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		ci, err := c.Info(ictx)
		if err != nil {
			ackErr = err
			return false
		}
		if ci.NumAckPending > 0 || ci.AckFloor.Stream < ci.Delivered.Stream || ci.Delivered.Consumer < uint64(total) {
			return false
		}
		acked = time.Since(due)
		return true
	}, func() string { return fmt.Sprintf("waiting for the ack floor (%v)", ackErr) }); err != nil {
		return err
	}
	after, err := totals(ctx, n.js)
	if err != nil {
		return err
	}
	burstValues(x, total, fired, acked, before, after)
	return nil
}

func burstValues(x *result, total int, fired, acked time.Duration, before, after streamTotals) {
	x.vals["burst_fired"] = fired.Seconds()
	x.vals["burst_fire_rate"] = float64(total) / fired.Seconds()
	x.vals["burst_acked"] = acked.Seconds()
	x.vals["burst_ack_rate"] = float64(total) / acked.Seconds()
	app, rem := writes(before, after)
	x.vals["writes"] = app / float64(total)
	x.vals["writes_removals"] = rem / float64(total)
}

// connect connects to url (a comma-separated list: node 0 first, kept first so that the
// bridge, the client and the consumers share one node).
func connect(url, name string) (*nats.Conn, error) {
	nc, err := nats.Connect(url, nats.Name(name), nats.DontRandomize(), nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", url, err)
	}
	return nc, nil
}
