package bridge

import (
	"context"
	"errors"
	"time"

	"github.com/axbridge/axbridge/bridge/internal/sched"

	"github.com/axbridge/axbridge/kvstore"
)

// The reconciler is the safety net behind the watch: every Config.ReconcileInterval it reads the
// bucket (the initial values of a second watch, which it then stops), at most
// Config.ReconcileRate records a second, and hands the loop every WAITING record more than
// Config.ReconcileGrace past due and every RUNNING record that long past the end of its lease. The
// loop answers whether its index holds that revision (or a newer one) in time, or a worker has it
// in hand; if not, the reconciler reads the record again (the watch's values may be a pass old)
// and, if it is still overdue, asks the loop to repair it: index it due now, and count it. A
// repair means an event was missed somewhere, which is a bug to chase, not routine.

// candidate is a record the reconciler found overdue.
type candidate struct {
	id     string
	rev    uint64
	kind   jobKind // jobFire (WAITING) or jobLease (RUNNING)
	due    int64   // when the index should have had it due, UTC Unix ms
	biz    string
	series *kvstore.Series
}

// reconcileMsg is the reconciler's message to the loop: a question (is c in hand? the loop sends
// true on reply if it is suspect) or, with repair set, a confirmed candidate to repair if it is
// still suspect.
type reconcileMsg struct {
	c      candidate
	repair bool
	reply  chan<- bool // capacity 1
}

// reconcile runs passes until ctx ends, talking to the loop on out.
func (b *Bridge) reconcile(ctx context.Context, out chan<- reconcileMsg) {
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
func (b *Bridge) reconcilePass(ctx context.Context, out chan<- reconcileMsg) (int, error) {
	// Only this replica's partitions: each replica repairs its own, so the cost divides too.
	o := b.own.Load()
	if o == nil || o.n == 0 {
		return 0, nil
	}
	w, err := b.startWatch(ctx, o.owned())
	if err != nil {
		return 0, err
	}
	defer func() { _ = w.Stop() }()
	p := pacer{rate: b.cfg.ReconcileRate, start: time.Now()}
	reply := make(chan bool, 1)
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
				if err := b.reconcileOne(ctx, out, reply, c); err != nil {
					return n, err
				}
			}
		}
		if err := p.wait(ctx, n+1); err != nil {
			return n, err
		}
	}
}

// reconcileOne asks the loop about c and, if the loop does not have it in hand, reads the record
// again and has the loop repair it if it is still overdue.
func (b *Bridge) reconcileOne(ctx context.Context, out chan<- reconcileMsg, reply chan bool, c candidate) error {
	ask := func(m reconcileMsg) (bool, error) {
		select {
		case out <- m:
		case <-ctx.Done():
			return false, ctx.Err()
		}
		if m.repair {
			return false, nil
		}
		select {
		case suspect := <-reply:
			return suspect, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	suspect, err := ask(reconcileMsg{c: c, reply: reply})
	if err != nil || !suspect {
		return err
	}
	gctx, cancel := context.WithTimeout(ctx, b.cfg.WatchTimeout)
	e, err := b.store.Get(gctx, c.id)
	cancel()
	if err != nil {
		if errors.Is(err, kvstore.ErrNotFound) || ctx.Err() != nil {
			return ctx.Err()
		}
		b.log.Debug("reconciler: read task again", "task_id", c.id, "err", err)
		return nil // the next pass looks again
	}
	if c, due := b.overdue(&e, b.cfg.Now().UnixMilli()); due {
		_, err = ask(reconcileMsg{c: c, repair: true})
	}
	return err
}

// overdue says whether the record should have had its next step by nowMs, by more than the grace.
func (b *Bridge) overdue(e *kvstore.Entry, nowMs int64) (candidate, bool) {
	t := &e.Task
	c := candidate{id: t.ID, rev: e.Revision, biz: t.BizType, series: t.Series}
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

// reconciled answers the reconciler: a question gets whether c is suspect; a confirmed candidate
// that is still suspect is repaired.
func (l *loopState) reconciled(m reconcileMsg) {
	c := sched.Candidate{ID: m.c.id, Rev: m.c.rev, Kind: m.c.kind, Due: m.c.due, BizType: m.c.biz, Series: m.c.series}
	why := l.c.Suspect(c)
	if !l.c.Owns(c.ID) || l.loading(kvstore.Partition(c.ID, l.b.nparts)) {
		why = "" // the partition moved away meanwhile, or its watch is still loading it
	}
	if !m.repair {
		m.reply <- why != ""
		return
	}
	if why == "" {
		return
	}
	kind := "waiting"
	if c.Kind == jobLease {
		kind = "running"
	}
	l.b.m.loop.repairs.WithLabelValues(kind).Inc()
	l.b.log.Warn("reconciler: task was not indexed in time; running its step now", "task_id", c.ID, "revision", c.Rev,
		"status", kind, "why", why, "due_ms", c.Due)
	l.c.Repair(c)
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
