package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func (r *runner) nativePending(ctx context.Context, srv *serverSet, x *result) error {
	n, err := r.openNative(ctx, srv)
	if err != nil {
		return err
	}
	total := r.o.pending
	rss0, rssErr := srv.rss()
	far := time.Now().Add(time.Hour)
	start := time.Now()
	if err := publishAll(ctx, r.p, "publish", n.nc, total, func(i int) *nats.Msg {
		return nativeSchedule(r.payload, "far", i, far.Add(time.Duration(i)*time.Millisecond))
	}); err != nil {
		n.close()
		return err
	}
	x.vals["pending_intake"] = float64(total) / time.Since(start).Seconds()
	if rss1, err := srv.rss(); err == nil && rssErr == nil {
		x.vals["server_rss"] = float64(rss1-rss0) / float64(total)
	}
	n.close()

	r.p.say("kill -9 and restart with %d schedules pending", total)
	srv.kill9()
	t0 := time.Now()
	if err := srv.restart(ctx); err != nil {
		return err
	}
	n, err = r.reopenNative(ctx, srv)
	if err != nil {
		return err
	}
	defer n.close()
	x.vals["restart_ready"] = time.Since(t0).Seconds()
	f := newFires()
	_, stop, err := n.consume(ctx, "new", f, nil)
	if err != nil {
		return err
	}
	defer stop()
	if _, err := n.js.PublishMsg(ctx, nativeSchedule(r.payload, "new", 0, time.Now())); err != nil {
		return fmt.Errorf("schedule after restart: %w", err)
	}
	err = r.waitFor(ctx, "first fire", time.Minute, func() bool { return f.distinct() >= 1 }, func() string { return "waiting" })
	lost, early := f.check(1)
	x.lost, x.early = lost, early
	if err != nil {
		return err
	}
	x.vals["restart_fire"] = f.lastAt().Sub(t0).Seconds()
	return n.checkStored(ctx, x, "far", total)
}

// reopenNative connects again after a restart and waits until the stream answers.
func (r *runner) reopenNative(ctx context.Context, srv *serverSet) (*nativeSide, error) {
	nc, err := connect(srv.url(), "bench-native")
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	var s jetstream.Stream
	if err := retry(ctx, 2*time.Minute, 10*time.Millisecond, func(ctx context.Context) (err error) {
		s, err = js.Stream(ctx, nativeStream)
		return err
	}); err != nil {
		nc.Close()
		return nil, fmt.Errorf("schedule stream after restart: %w", err)
	}
	return &nativeSide{nc: nc, js: js, s: s}, nil
}
