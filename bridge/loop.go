package bridge

import (
	"context"
	"time"

	"github.com/axbridge/axbridge/bridge/internal/sched"
	"github.com/axbridge/axbridge/kvstore"
)

// The loop's work and its workers' reports are the scheduling core's (bridge/internal/sched).
type (
	jobKind = sched.Kind
	job     = sched.Job
	result  = sched.Result
)

const (
	jobFire    = sched.Fire    // WAITING and due: claim, then publish to ax.fire.<bizType>
	jobPreRead = sched.PreRead // WAITING and due soon: read the payload ahead of time
	jobLease   = sched.Lease   // RUNNING and the lease ended: count the attempt as failed
	jobPublish = sched.Publish // RUNNING, claimed ahead and now due: the loop publishes it
	maxQueued  = sched.MaxQueued
)

// loopState is owned by the loop goroutine alone: the scheduling core, and what the loop needs
// to feed it (the clocks, the claim-ahead window) and to report on it.
type loopState struct {
	b         *Bridge
	c         *sched.Core
	now       reading // the latest reading of the clocks
	clock     stepDetector
	aheadAt   time.Time        // monotonic: when the claim-ahead window was last computed
	loading   func(p int) bool // whether a watch is still loading partition p
	loadAny   func() bool      // whether a watch is still loading any partition
	lastStats time.Time        // monotonic: when the overdue gauges were last computed
	shares    bizShares        // the bizType limits' shares (biz_limits.go)
}

func (b *Bridge) newLoopState(cfg schedConfig, parts []int) *loopState {
	l := &loopState{b: b, now: b.read(), shares: bizShares{window: b.cfg.AckWait + b.cfg.LeaseSkew}}
	l.c = sched.New(sched.Config{Replica: b.cfg.ReplicaID, Partitions: b.nparts, PreRead: cfg.PreRead,
		MaxPreReadTasks: cfg.MaxPreReadTasks, MaxPreReadBytes: cfg.MaxPreReadBytes, LeaseSkew: cfg.LeaseSkew,
		MaxClaims: cfg.MaxClaims}, parts, l.now)
	l.clock.check(l.now)
	l.loading = func(int) bool { return false }
	l.loadAny = func() bool { return false }
	l.applyLimits(true)
	return l
}

// loop is the scheduling loop: a select around the scheduling core, which owns the index and
// decides every step. The loop reads watch events (watches), worker results and the reconciler's
// findings into the core, hands the core's jobs to the workers, publishes the held fires it
// returns, and sleeps on one timer armed to the core's next due step (at most idleCheck away).
// cfg is the sched service's; parts are the partitions owned at Start, whose watch first is
// (nil if none). It closes b.jobs and b.loopEnd when it returns, after its helper goroutines
// have ended.
func (b *Bridge) loop(ctx context.Context, cfg schedConfig, first kvstore.Watcher, parts []int) {
	defer close(b.loopEnd)
	defer close(b.jobs)
	l := b.newLoopState(cfg, parts)
	ws := newLoopWatch(ctx, b, l, first, parts)
	defer ws.stop()
	found := make(chan reconcileMsg) // reconciler ⇄ loop: records the index may have missed
	ws.helpers.Add(1)
	go func() {
		defer ws.helpers.Done()
		b.reconcile(ctx, found)
	}()
	timer := time.NewTimer(idleCheck)
	defer timer.Stop()
	for {
		var out chan<- job
		next, ok := l.c.Next()
		if ok {
			out = b.jobs
		}
		select {
		case <-ctx.Done():
			l.drainHeld()
			return
		case ev, ok := <-ws.events:
			if !ws.event(ev, ok) {
				l.drainHeld()
				return
			}
		case nw := <-ws.watches:
			ws.started(nw)
		case <-b.ownChanged:
			ws.reown()
			l.applyLimits(false)
		case <-b.biz.changed:
			l.applyLimits(true)
		case r := <-b.results:
			l.tick()
			l.c.Result(r)
		case q := <-b.census:
			q.reply <- q.run(l)
		case m := <-found:
			l.tick()
			l.reconciled(m)
		case <-timer.C:
		case out <- next:
			l.handOut(next)
		}
		l.turn()
		timer.Reset(l.c.Wait(b.alive(), idleCheck))
	}
}

// tick reads the clocks into the core.
func (l *loopState) tick() {
	l.now = l.b.read()
	l.c.Now(l.now)
}

// handOut tells the core a worker took j, and hands out more while workers are waiting,
// without a turn each.
func (l *loopState) handOut(j job) {
	l.c.Sent(j)
	for {
		next, ok := l.c.Next()
		if !ok {
			return
		}
		select {
		case l.b.jobs <- next:
			l.c.Sent(next)
		default:
			return
		}
	}
}

// turn runs after every event: it reads the clocks, notices a wall-clock step, lets the core
// take the steps that are due, carries out what the core asks, and updates the gauges.
func (l *loopState) turn() {
	b := l.b
	l.tick()
	if step, ok := l.clock.check(l.now); ok {
		dir := "forward"
		if step < 0 {
			dir = "backward"
		}
		b.m.loop.clockSteps.WithLabelValues(dir).Inc()
		b.log.Warn("wall clock stepped; due times are judged by the new reading", "step", step)
	}
	l.refreshAhead()
	l.c.SetLoading(l.loadAny()) // a replica still loading claims less (sched's claim budget)
	l.c.Take(b.alive(), b.nc.IsConnected())
	l.carryOut()
	l.stats()
}

// carryOut does what the core asked for since the last call: publish the held fires due now,
// drop the fired cache's records of tasks that moved on, and say what was not fired.
func (l *loopState) carryOut() {
	b := l.b
	rd := l.c.Ready()
	for _, e := range rd.Publish {
		if b.publishFire(e) {
			b.m.loop.heldFires.Inc()
		}
	}
	for _, e := range rd.Fenced {
		b.m.members.fencedFires.Inc()
		b.log.Warn("claimed ahead but not fired: no heartbeat of this replica confirmed at the task's due time",
			"task_id", e.Task.ID, "attempt", e.Task.Attempt)
	}
	for _, d := range rd.Drops {
		b.fired.drop(d.ID, d.Rev)
	}
	for _, id := range rd.Behind {
		b.log.Warn("task not found at the revision the index has; left to the reconciler", "task_id", id)
	}
}

// apply feeds one watch event to the core.
func (l *loopState) apply(ev kvstore.Event) {
	if ev.Kind == kvstore.EventError {
		l.b.m.corrupt.Inc()
		l.b.log.Error("unreadable task record; left alone", "task_id", ev.ID, "revision", ev.Revision, "err", ev.Err)
	}
	l.c.Apply(ev)
}

// stats updates the gauges: the cheap ones every turn, the overdue ones at most once a second.
func (l *loopState) stats() {
	m := l.b.m
	s := l.c.Stats()
	m.pending.Set(float64(s.Indexed))
	m.loop.queued.Set(float64(s.Queued))
	m.loop.preRead.Set(float64(s.PreRead))
	m.loop.preReadBytes.Set(float64(s.PreReadBytes))
	out, budget := l.c.Claiming()
	m.loop.claimsOut.Set(float64(out))
	m.loop.claimBudget.Set(float64(budget))
	if obs := m.loop.observe; obs != nil {
		obs(loopStats{queued: s.Queued, preRead: s.PreRead, preReadBytes: s.PreReadBytes, indexed: s.Indexed, held: s.Held})
	}
	if l.now.Mono.Sub(l.lastStats) < idleCheck {
		return
	}
	l.lastStats = l.now.Mono
	l.applyLimits(false) // a share's window may have ended
	l.b.outage.tick()
	n, oldest := l.c.Overdue()
	m.loop.overdue.Set(float64(n))
	m.loop.pausedDue.Set(float64(l.c.PausedDue()))
	byBiz := l.c.OldestDue()
	l.b.oldestDue.Store(&byBiz)
	age := 0.0
	if n > 0 {
		age = float64(l.now.Ms-oldest) / 1000
	}
	m.loop.oldestOverdue.Set(age)
}

// leaseDue is when a RUNNING task's lease counts as ended here (sched.LeaseDue).
func (b *Bridge) leaseDue(t *kvstore.Task) int64 {
	return sched.LeaseDue(t, b.cfg.ReplicaID, b.cfg.LeaseSkew)
}
