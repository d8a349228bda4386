package integration

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/natstest"
)

// The peer benchmarks: the scenarios of BenchmarkLateness and BenchmarkFireAck run against NATS's
// own message scheduling (Nats-Schedule, nats-server 2.12+) instead of the bridge, so that one
// `go test -bench 'Lateness|FireAck|Burst' -benchtime 1x` run measures both.
//
// How Nats-Schedule works (nats-server v2.15.2, server/scheduler.go and stream.go):
//   - the stream needs AllowMsgSchedules (which forces AllowRollup); the schedule subject and the
//     target subject must both be subjects of that stream, and differ;
//   - a message with `Nats-Schedule: @at <RFC 3339>` and `Nats-Schedule-Target: <subject>` is a
//     schedule; the server adds `Nats-Rollup: sub` to it, so a subject holds at most one
//     schedule: a second one on the same subject replaces the first (each task needs its own
//     schedule subject);
//   - when due, the server stores a copy (headers minus Nats-Schedule*, plus Nats-Scheduler and
//     Nats-Schedule-Next: purge) on the target subject *in the stream*, and that copy purges the
//     schedule. Nothing is published on core NATS: consumers read the target with a JetStream
//     consumer;
//   - due schedules are found by a timer over a hashed wheel of 1s slots; after each run the timer
//     is re-armed no sooner than 250ms later, so fires come in batches at least 250ms apart.
//
// Lateness is the consumer's receive time minus the due time, carried in our own header
// (Nats-Schedule is stripped from the fired copy).

const (
	peerStream  = "PEER_SCHED"
	peerDueAt   = "Peer-Due-At" // our header: the schedule's @at time, RFC 3339 with nanoseconds
	peerSchedPf = "peer.sched." // schedule subjects: peer.sched.<biz>.<i>, one schedule each
	peerFirePf  = "peer.fire."  // target subjects: peer.fire.<biz>
)

// nativeEnv is an in-process JetStream server with a stream that allows message schedules.
type nativeEnv struct {
	nc *nats.Conn
	js jetstream.JetStream
	s  jetstream.Stream
}

func newNativeEnv(t testing.TB) *nativeEnv {
	t.Helper()
	srv := natstest.RunServer(t)
	nc := natstest.Connect(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:              peerStream,
		Subjects:          []string{peerSchedPf + ">", peerFirePf + ">"},
		Storage:           jetstream.FileStorage, // as the bridge's intake stream and task bucket
		AllowMsgSchedules: true,
		AllowRollup:       true,
	})
	if err != nil {
		t.Fatalf("create stream: %v", err)
	}
	return &nativeEnv{nc: nc, js: js, s: s}
}

// publishSchedules publishes n schedules, the i-th on peer.sched.<biz>.<i> targeting
// peer.fire.<biz> and due at at(i), pipelined as publishAll does, and waits until the stream
// accepted every one (a refused schedule fails the benchmark).
func (e *nativeEnv) publishSchedules(b *testing.B, biz string, n int, at func(i int) time.Time) {
	b.Helper()
	target := peerFirePf + biz
	publishMsgs(b, e.nc, n, func(i int) *nats.Msg {
		m := nats.NewMsg(peerSchedPf + biz + "." + strconv.Itoa(i))
		m.Data = benchPayload
		due := at(i).UTC().Format(time.RFC3339Nano)
		m.Header.Set("Nats-Schedule", "@at "+due) // the server parses RFC 3339 with fractions
		m.Header.Set("Nats-Schedule-Target", target)
		m.Header.Set(peerDueAt, due)
		return m
	})
}

// consume reads peer.fire.<biz> with a pull consumer that acks each message (as the bridge's
// benchmark consumers ack each fire) and hands every message with its receive time to handle.
func (e *nativeEnv) consume(b *testing.B, biz string, handle func(m jetstream.Msg, now time.Time)) (jetstream.Consumer, jetstream.ConsumeContext) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := e.s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubject: peerFirePf + biz,
		AckPolicy:     jetstream.AckExplicitPolicy,
		MaxAckPending: -1,
	})
	if err != nil {
		b.Fatal(err)
	}
	cc, err := c.Consume(func(m jetstream.Msg) {
		now := time.Now()
		handle(m, now)
		_ = m.Ack()
	}, jetstream.PullMaxMessages(1000))
	if err != nil {
		b.Fatal(err)
	}
	return c, cc
}

func stopConsume(b *testing.B, cc jetstream.ConsumeContext) {
	cc.Stop()
	select {
	case <-cc.Closed():
	case <-time.After(10 * time.Second):
		b.Error("consumer did not stop within 10s")
	}
}

// BenchmarkLatenessNative is BenchmarkLateness with NATS's own schedules: 100k far-future
// schedules pending (1h + i ms ahead), then 10k due over 5s from 10s after publishing begins.
// Reports p50, p99, max (ms) and early fires.
func BenchmarkLatenessNative(b *testing.B) {
	b.Run("impl=nats-schedule", func(b *testing.B) {
		pending, firing := envInt("AX_BENCH_PENDING", 100_000), envInt("AX_BENCH_FIRING", 10_000)
		for range b.N {
			e := newNativeEnv(b)
			now := time.Now()
			e.publishSchedules(b, "far", pending, func(i int) time.Time {
				return now.Add(time.Hour + time.Duration(i)*time.Millisecond)
			})

			var late lateness
			var bad atomic.Int64
			_, cc := e.consume(b, "soon", func(m jetstream.Msg, now time.Time) {
				d, err := time.Parse(time.RFC3339Nano, m.Headers().Get(peerDueAt))
				if err != nil {
					bad.Add(1)
					return
				}
				late.add(d, now)
			})
			start := time.Now().Add(10 * time.Second)
			e.publishSchedules(b, "soon", firing, func(i int) time.Time {
				return start.Add(time.Duration(i) * 5 * time.Second / time.Duration(firing))
			})
			if !checkFor(time.Until(start)+time.Minute, func() bool { return late.count() >= firing }) {
				b.Fatalf("%d of %d schedules fired", late.count(), firing)
			}
			stopConsume(b, cc)
			if n := bad.Load(); n > 0 {
				b.Fatalf("%d fired messages without %s", n, peerDueAt)
			}
			late.report(b)
		}
	})
}

// BenchmarkBurstNative is BenchmarkFireAck with NATS's own schedules: benchTasks schedules due
// at one instant, 30s ahead. tasks/s is from the due time until the consumer received the last
// one (the bridge's equivalent is FireAck's fired/s; its tasks/s also waits for every ack to be
// applied). acked/s is from the due time until the consumer has no ack pending.
func BenchmarkBurstNative(b *testing.B) {
	b.Run("impl=nats-schedule", func(b *testing.B) {
		for range b.N {
			e := newNativeEnv(b)
			var received atomic.Int64
			var lastRecv atomic.Int64
			c, cc := e.consume(b, "burst", func(_ jetstream.Msg, now time.Time) {
				received.Add(1)
				lastRecv.Store(now.UnixNano())
			})
			due := time.Now().Add(30 * time.Second).Truncate(time.Millisecond)
			e.publishSchedules(b, "burst", benchTasks, func(int) time.Time { return due })
			if time.Now().After(due) {
				b.Fatal("publishing took longer than the lead time; raise it")
			}
			if !checkFor(time.Until(due)+5*time.Minute, func() bool { return received.Load() >= int64(benchTasks) }) {
				b.Fatalf("%d of %d schedules fired", received.Load(), benchTasks)
			}
			took := time.Unix(0, lastRecv.Load()).Sub(due)
			var acked time.Duration
			if !checkFor(5*time.Minute, func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				ci, err := c.Info(ctx)
				if err != nil || ci.NumAckPending > 0 || ci.AckFloor.Stream < ci.Delivered.Stream {
					return false
				}
				acked = time.Since(due)
				return true
			}) {
				b.Fatal("acks not applied within 5m")
			}
			stopConsume(b, cc)
			b.ReportMetric(float64(benchTasks)/took.Seconds(), "tasks/s")
			b.ReportMetric(float64(benchTasks)/acked.Seconds(), "acked/s")
		}
	})
}

// TestNatsScheduleOnePerSubject pins the property the peer benchmarks rely on: a second
// schedule on the same subject replaces the first (the server rolls the subject up), so only the
// second fires.
func TestNatsScheduleOnePerSubject(t *testing.T) {
	e := newNativeEnv(t)
	js, s := e.js, e.s
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	due := time.Now().Add(time.Second)
	for i, body := range []string{"first", "second"} {
		m := nats.NewMsg(peerSchedPf + "one.x")
		m.Data = []byte(body)
		m.Header.Set("Nats-Schedule", "@at "+due.Add(time.Duration(i)*100*time.Millisecond).UTC().Format(time.RFC3339Nano))
		m.Header.Set("Nats-Schedule-Target", peerFirePf+"one")
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(peerSchedPf+">"))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 || info.State.Subjects[peerSchedPf+"one.x"] != 1 {
		t.Fatalf("schedule subject holds %d messages (%v), want 1", info.State.Msgs, info.State.Subjects)
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{peerFirePf + "one"}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data()) != "second" {
		t.Fatalf("fired %q, want second", m.Data())
	}
	if got := m.Headers().Get("Nats-Scheduler"); got != peerSchedPf+"one.x" {
		t.Fatalf("Nats-Scheduler %q", got)
	}
	// The fire purged the schedule: nothing is left on the schedule subject.
	if !checkFor(5*time.Second, func() bool {
		info, err := s.Info(ctx)
		return err == nil && info.State.Msgs == 1 // the fired copy only
	}) {
		t.Fatal("schedule not purged after firing")
	}
}
