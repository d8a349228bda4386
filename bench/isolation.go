package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
)

// The isolation rows: --burst tasks of the bizType "reports" due at one instant D, and "orders"
// tasks due every isoStep (200 a second) from up to isoBefore before D (half the time left when
// they are published, if that is less) to isoAfter after it. The orders lateness of those due
// before D is the bizType alone; of those due from D on, during the other's burst.
const (
	isoStep   = 5 * time.Millisecond
	isoBefore = 2 * time.Second
	isoAfter  = 8 * time.Second
)

func (r *runner) nativeIsolation(ctx context.Context, srv *serverSet, x *result) error {
	n, err := r.openNative(ctx, srv)
	if err != nil {
		return err
	}
	defer n.close()
	reports, orders := newFires(), newFires()
	for biz, f := range map[string]*fires{"reports": reports, "orders": orders} {
		_, stop, err := n.consume(ctx, biz, f, nil)
		if err != nil {
			return err
		}
		defer stop()
	}
	due := time.Now().Add(r.burstLead("native")).Truncate(time.Millisecond)
	if err := publishAll(ctx, r.p, "publish reports", n.nc, r.o.burst, func(i int) *nats.Msg {
		return nativeSchedule(r.payload, "reports", i, due)
	}); err != nil {
		return err
	}
	return r.isoFinish(ctx, x, due, n.nc, reports, orders, func(i int, at time.Time) *nats.Msg {
		return nativeSchedule(r.payload, "orders", i, at)
	})
}

func (r *runner) bridgeIsolation(ctx context.Context, srv *serverSet, x *result) error {
	s, err := r.openBridge(ctx, srv)
	if err != nil {
		return err
	}
	defer s.close()
	reports, orders := newFires(), newFires()
	for biz, f := range map[string]*fires{"reports": reports, "orders": orders} {
		if err := s.consume(biz, f, nil, nil, nil); err != nil {
			return err
		}
	}
	due := time.Now().Add(r.burstLead("bridge")).Truncate(time.Millisecond)
	at := func(t time.Time) func(nats.Header) {
		return func(h nats.Header) { h.Set(bridge.HeaderDeliverAt, strconv.FormatInt(t.UnixMilli(), 10)) }
	}
	if err := publishAll(ctx, r.p, "publish reports", s.nc, r.o.burst, func(i int) *nats.Msg {
		return bridgeSchedule(r.payload, "reports", i, at(due))
	}); err != nil {
		return err
	}
	if err := r.waitStored(ctx, s, time.Until(due)); err != nil {
		return fmt.Errorf("reports not all stored before their due instant: raise --lead: %w", err)
	}
	err = r.isoFinish(ctx, x, due, s.nc, reports, orders, func(i int, t time.Time) *nats.Msg {
		return bridgeSchedule(r.payload, "orders", i, at(t))
	})
	s.account(x)
	return err
}

// isoFinish publishes the orders tasks, waits for every fire of both bizTypes, and sets the
// isolation values from the orders fires.
func (r *runner) isoFinish(ctx context.Context, x *result, due time.Time, nc *nats.Conn,
	reports, orders *fires, order func(i int, at time.Time) *nats.Msg) error {
	from := due.Add(-min(isoBefore, time.Until(due)/2))
	n := int(due.Add(isoAfter).Sub(from) / isoStep)
	if err := publishAll(ctx, r.p, "publish orders", nc, n, func(i int) *nats.Msg {
		return order(i, from.Add(time.Duration(i)*isoStep))
	}); err != nil {
		return err
	}
	if time.Now().After(from) {
		return fmt.Errorf("publishing ran past the first orders task's due time: raise --lead")
	}
	r.p.say("all published; the reports are due in %v", time.Until(due).Truncate(time.Millisecond))
	err := r.waitFor(ctx, "fires", time.Until(due)+isoAfter+10*time.Minute,
		func() bool { return reports.distinct() >= r.o.burst && orders.distinct() >= n },
		func() string {
			return fmt.Sprintf("%d/%d reports, %d/%d orders fired", reports.distinct(), r.o.burst, orders.distinct(), n)
		})
	lr, er := reports.check(r.o.burst)
	lo, eo := orders.check(n)
	x.lost, x.early = lr+lo, er+eo
	if err != nil {
		return err
	}
	alone, during := orders.lateBySplit(due)
	if _, p99, _, ok := percentiles(alone); ok {
		x.vals["iso_alone_p99"] = p99
	}
	if _, p99, pmax, ok := percentiles(during); ok {
		x.vals["iso_burst_p99"], x.vals["iso_burst_max"] = p99, pmax
	}
	x.vals["iso_burst_fired"] = reports.lastAt().Sub(due).Seconds()
	return nil
}
