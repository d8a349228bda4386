package bridge

import (
	"context"
	"errors"
	"time"

	"github.com/axbridge/axbridge/kvstore"
)

// The reconciler is the safety net behind the watch: every Config.ReconcileInterval it reads the
// bucket (the initial values of a second watch, which it then stops), at most
// Config.ReconcileRate records a second, and hands the loop every WAITING record more than
// Config.ReconcileGrace past due and every RUNNING record that long past the end of its lease. The
// loop repairs those its index does not hold at that revision in time (check), and counts each
// repair: a repair means an event was missed somewhere, which is a bug to chase, not routine.

// candidate is a record the reconciler found overdue.
type candidate struct {
	id   string
	rev  uint64
	kind jobKind // jobFire (WAITING) or jobLease (RUNNING)
	due  int64   // when the index should have had it due, UTC Unix ms
}

// reconcile runs passes until ctx ends, handing candidates to the loop on out.
func (b *Bridge) reconcile(ctx context.Context, out chan<- candidate) {
	t := time.NewTimer(b.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := b.reconcilePass(ctx, out); err != nil && ctx.Err() == nil {
			b.log.Warn("reconcile pass ended early; the next one starts as usual", "records", n, "err", err)
		}
		t.Reset(b.cfg.ReconcileInterval)
	}
}

// reconcilePass reads every record once and returns how many it read.
func (b *Bridge) reconcilePass(ctx context.Context, out chan<- candidate) (int, error) {
	w, err := b.startWatch(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = w.Stop() }()
	p := pacer{rate: b.cfg.ReconcileRate, start: time.Now()}
	for n := 0; ; n++ {
		var ev kvstore.Event
		var ok bool
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case ev, ok = <-w.Events():
		}
		switch {
		case !ok:
			return n, errors.New("the watch ended")
		case ev.Kind == kvstore.EventInitDone:
			return n, nil
		case ev.Kind == kvstore.EventPut:
			if c, due := b.overdue(&ev.Entry, b.cfg.Now().UnixMilli()); due {
				select {
				case out <- c:
				case <-ctx.Done():
					return n, ctx.Err()
				}
			}
		}
		if err := p.wait(ctx, n+1); err != nil {
			return n, err
		}
	}
}

// overdue says whether the record should have had its next step by nowMs, by more than the grace.
func (b *Bridge) overdue(e *kvstore.Entry, nowMs int64) (candidate, bool) {
	t := &e.Task
	c := candidate{id: t.ID, rev: e.Revision}
	switch t.Status {
	case kvstore.StatusWaiting:
		c.kind, c.due = jobFire, t.DueAt
	case kvstore.StatusRunning:
		c.kind, c.due = jobLease, b.leaseDue(t)
	default:
		return c, false
	}
	return c, addMs(c.due, b.cfg.ReconcileGrace) <= nowMs
}

// check compares a candidate with the index: a record the index holds at that revision (or a
// newer one), due no later than it should be, is fine, and so is one a worker has in hand;
// anything else is indexed due now and counted as a repair.
func (l *loopState) check(c candidate) {
	why := "missing"
	if cur, ok := l.idx.get(c.id); ok && cur.rev >= c.rev {
		if cur.rev > c.rev || cur.due <= c.due {
			return
		}
		why = "late"
	} else if f, ok := l.flight[c.id]; ok && f.rev >= c.rev && l.now.mono.Sub(f.at) < flightStale {
		return
	}
	kind := "waiting"
	if c.kind == jobLease {
		kind = "running"
	}
	l.b.m.loop.repairs.WithLabelValues(kind).Inc()
	l.b.log.Warn("reconciler: task was not indexed in time; firing it now", "task_id", c.id, "revision", c.rev,
		"status", kind, "why", why, "due_ms", c.due)
	delete(l.flight, c.id)
	l.idx.put(c.id, l.now.ms, c.rev, c.kind)
}

// pacer keeps a pass at rate records a second.
type pacer struct {
	rate  int
	start time.Time
}

// wait sleeps, every tenth of a second's worth of records, until n records are due by the rate.
func (p *pacer) wait(ctx context.Context, n int) error {
	chunk := max(1, p.rate/10)
	if n%chunk != 0 {
		return nil
	}
	ahead := time.Duration(float64(n)/float64(p.rate)*float64(time.Second)) - time.Since(p.start)
	if ahead <= 0 {
		return nil
	}
	t := time.NewTimer(ahead)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
