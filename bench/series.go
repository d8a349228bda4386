package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/bridge"
)

// The series rows: one schedule that fires every second, --series-ticks times, on each side.
// Native: `Nats-Schedule: @every 1s`; each fire carries Nats-Schedule-Next, the tick after it, so
// a fire's lateness is its receive time against the previous fire's Next (the first fire has no
// known tick and is not measured). Bridge: `Ax-Every: 1s` with `Ax-Max-Runs`, lateness against
// each fire's Ax-Due-At. A tick fired twice or not at all counts as lost.
//
// The limits rows (bridge only; native has no such bound): --limit-tasks tasks of one bizType due
// at once, with max_in_flight 100 set through ax.api.biz.set, and a consumer that holds each
// fire limitHold before its ack: the most it held at once, counted on its side, and the drain.

const (
	seriesEvery = time.Second
	limitMax    = 100
	limitHold   = 20 * time.Millisecond
)

func (r *runner) nativeSeries(ctx context.Context, srv *serverSet, x *result) error {
	n, err := r.openNative(ctx, srv)
	if err != nil {
		return err
	}
	defer n.close()
	f := newFires()
	var mu sync.Mutex
	var next time.Time // the tick the next fire is for
	k := 0
	c, err := n.s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubject: nativeFirePf + "ticks", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		return err
	}
	cc, err := c.Consume(func(m jetstream.Msg) {
		now := time.Now()
		mu.Lock()
		due := next
		next, _ = time.Parse(time.RFC3339Nano, m.Headers().Get("Nats-Schedule-Next"))
		k++
		id := strconv.Itoa(k)
		mu.Unlock()
		f.add(id, now, due, time.Time{})
		_ = m.Ack()
	})
	if err != nil {
		return err
	}
	defer func() { cc.Stop(); <-cc.Closed() }()
	m := nats.NewMsg(nativeSchedPf + "ticks.0")
	m.Data = r.payload
	m.Header.Set("Nats-Schedule", "@every "+seriesEvery.String())
	m.Header.Set("Nats-Schedule-Target", nativeFirePf+"ticks")
	if _, err := n.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("publish the schedule: %w", err)
	}
	return r.seriesFinish(ctx, x, f)
}

func (r *runner) bridgeSeries(ctx context.Context, srv *serverSet, x *result) error {
	s, err := r.openBridge(ctx, srv)
	if err != nil {
		return err
	}
	defer s.close()
	f := newFires()
	sub, err := s.nc.Subscribe(bridge.FirePrefix+"ticks", func(m *nats.Msg) {
		due, _ := time.Parse(time.RFC3339Nano, m.Header.Get(bridge.HeaderDueAt))
		f.add(m.Header.Get(bridge.HeaderRun), time.Now(), due, time.Time{})
		_ = m.Respond(nil)
	})
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	m := bridgeSchedule(r.payload, "ticks", 0, func(h nats.Header) {
		h.Set(bridge.HeaderEvery, seriesEvery.String())
		h.Set(bridge.HeaderDelay, seriesEvery.String())
		h.Set(bridge.HeaderMaxRuns, strconv.Itoa(r.o.seriesTicks))
	})
	if _, err := s.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("publish the series: %w", err)
	}
	err = r.seriesFinish(ctx, x, f)
	s.account(x)
	return err
}

// seriesFinish waits for --series-ticks fires and sets the series values.
func (r *runner) seriesFinish(ctx context.Context, x *result, f *fires) error {
	want := r.o.seriesTicks
	err := r.waitFor(ctx, "ticks", time.Duration(want+10)*seriesEvery,
		func() bool { return f.distinct() >= want },
		func() string { return fmt.Sprintf("%d/%d ticks fired", f.distinct(), want) })
	<-time.After(seriesEvery / 2) // a tick fired twice would come now
	lost, early := f.check(want)
	x.lost, x.early = lost, early
	if err != nil {
		return err
	}
	x.vals["series_ticks"] = float64(f.distinct())
	late, _ := f.lateBySplit(time.Now().Add(time.Hour))
	if p50, p99, pmax, ok := percentiles(late); ok {
		x.vals["series_p50"], x.vals["series_p99"], x.vals["series_max"] = p50, p99, pmax
	}
	return nil
}

// bridgeLimits runs the limits rows on the bridge side (the native side has none).
func (r *runner) bridgeLimits(ctx context.Context, srv *serverSet, x *result) error {
	s, err := r.openBridge(ctx, srv)
	if err != nil {
		return err
	}
	defer s.close()
	body, _ := json.Marshal(map[string]any{"biz_type": "limited", "max_in_flight": limitMax})
	if m, err := s.nc.Request(bridge.APIBizSet, body, 10*time.Second); err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
		return fmt.Errorf("biz.set: %v %v", err, m.Header)
	}
	var mu sync.Mutex
	cur, peak := 0, 0
	f := newFires()
	sub, err := s.nc.Subscribe(bridge.FirePrefix+"limited", func(m *nats.Msg) {
		due, _ := time.Parse(time.RFC3339Nano, m.Header.Get(bridge.HeaderDueAt))
		f.add(m.Header.Get(bridge.HeaderTaskID), time.Now(), due, time.Time{})
		mu.Lock()
		cur++
		peak = max(peak, cur)
		mu.Unlock()
		time.AfterFunc(limitHold, func() {
			mu.Lock()
			cur--
			mu.Unlock()
			_ = m.Respond(nil)
		})
	})
	if err != nil {
		return err
	}
	_ = sub.SetPendingLimits(-1, -1)
	defer func() { _ = sub.Unsubscribe() }()
	n := r.o.limitTasks
	due := time.Now().Add(r.leadFor("bridge", n)).Truncate(time.Millisecond)
	if err := publishAll(ctx, r.p, "publish limited", s.nc, n, func(i int) *nats.Msg {
		return bridgeSchedule(r.payload, "limited", i, func(h nats.Header) {
			h.Set(bridge.HeaderDeliverAt, strconv.FormatInt(due.UnixMilli(), 10))
		})
	}); err != nil {
		return err
	}
	err = r.waitFor(ctx, "limited fires", time.Until(due)+10*time.Minute,
		func() bool { return f.distinct() >= n },
		func() string { return fmt.Sprintf("%d/%d fired", f.distinct(), n) })
	x.lost, x.early = f.check(n)
	s.account(x)
	if err != nil {
		return err
	}
	mu.Lock()
	x.vals["limit_peak"] = float64(peak)
	mu.Unlock()
	x.vals["limit_drain"] = f.lastAt().Sub(due).Seconds()
	x.notes = append(x.notes, fmt.Sprintf("limits: max_in_flight %d, each fire held %v: at most %d held at once by the consumer (a bound kept: ≤ %d)", limitMax, limitHold, peak, limitMax))
	return nil
}
