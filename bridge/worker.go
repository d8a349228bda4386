package bridge

import (
	"context"
	"errors"
	"math"

	"github.com/axbridge/axbridge/internal/retry"
	"github.com/axbridge/axbridge/kvstore"
)

// worker runs jobs from the loop until the loop closes the job channel.
func (b *Bridge) worker(ctx context.Context) {
	for j := range b.jobs {
		switch j.Kind {
		case jobFire:
			b.fire(ctx, j)
		case jobPreRead:
			b.preRead(ctx, j)
		case jobLease:
			b.leaseEnded(ctx, j)
		}
	}
}

// report hands a result to the loop, unless the loop is gone (then the store still holds the
// truth and the next start recovers it).
func (b *Bridge) report(r result) {
	select {
	case b.results <- r:
	case <-b.loopEnd:
	}
}

// retryLater puts the task back in the index to try the step again after a failed store call.
// An outage is logged once when it starts and once when it ends, not once per task.
func (b *Bridge) retryLater(j job, reason string, err error) {
	b.outage.failed(reason, j.ID, err)
	b.report(result{ID: j.ID, Rev: j.Rev, Kind: j.Kind, At: b.retryAt(), Retry: true,
		Unsure: j.Unsure})
}

// readBehind puts a step back for another read soon: its read returned no record, or an older
// revision than the one the index has. On a replicated bucket the watch can run ahead of the
// stream leader, which answers reads; a record really deleted meanwhile comes as a watch event,
// which drops the step.
func (b *Bridge) readBehind(j job) {
	b.report(result{ID: j.ID, Rev: j.Rev, Kind: j.Kind, Behind: true})
}

// load returns the job's record: the pre-read one, or a fresh read. A partial entry (state
// without payload, from a watch's initial values) never reaches a job by design; if one does, it
// is read again rather than claimed or published with an empty body.
func (b *Bridge) load(ctx context.Context, j job) (kvstore.Entry, bool) {
	if j.Entry != nil && !j.Entry.Partial {
		return *j.Entry, true
	}
	e, err := b.store.Get(ctx, j.ID)
	switch {
	case errors.Is(err, kvstore.ErrNotFound):
		b.readBehind(j)
		return e, false
	case err != nil:
		b.retryLater(j, "read", err)
		return e, false
	}
	b.outage.ok()
	return e, true
}

// preRead loads the records of tasks due soon, with their payloads, in one batched read, so that
// firing them is a single write. A failed read costs nothing but a read at fire time.
func (b *Bridge) preRead(ctx context.Context, j job) {
	es, err := b.store.GetMany(ctx, j.IDs)
	if err != nil {
		b.log.Debug("pre-read", "tasks", len(j.IDs), "err", err)
	} else {
		b.outage.ok()
	}
	b.report(result{Read: true, Entries: es}) // also when it read none: the core counts the reads out
}

// leaseEnded counts a RUNNING task whose lease ran out as a failed attempt.
func (b *Bridge) leaseEnded(ctx context.Context, j job) {
	if !b.ownsTask(j.ID) {
		b.report(result{ID: j.ID, Rev: j.Rev, Kind: jobLease, At: b.retryAt(), Retry: true})
		return
	}
	e, ok := b.load(ctx, j)
	switch {
	case !ok:
		return
	case e.Revision < j.Rev:
		b.readBehind(j)
		return
	case e.Task.Status != kvstore.StatusRunning:
		return
	}
	nowMs := b.cfg.Now().UnixMilli()
	if due := b.leaseDue(&e.Task); due > nowMs {
		// Not ended by this bridge's clock (another replica's lease ends a skew margin later here).
		b.report(result{ID: j.ID, Rev: e.Revision, Kind: jobLease, At: due})
		return
	}
	if !b.ownsTask(j.ID) {
		b.report(result{ID: j.ID, Rev: e.Revision, Kind: jobLease, At: b.retryAt(), Retry: true})
		return
	}
	if b.hand.holds(j.ID, e.Task.Claim, e.Task.LeaseUntil) {
		// The consumer answered within the lease and its answer is being written: it decides.
		b.report(result{ID: j.ID, Rev: e.Revision, Kind: jobLease, At: b.retryAt()})
		return
	}
	if e.Task.Owner == b.cfg.ReplicaID && b.out.holds(j.ID, e.Task.Claim, math.MaxInt64) {
		// This replica's claim has not even been answered: nobody published the attempt, so it
		// is given back, not counted.
		if next, err := kvstore.Unclaim(e.Task, e.Task.Claim, nowMs); err == nil && b.commit(ctx, j, e, &next) {
			b.m.givenBack.WithLabelValues(e.Task.BizType).Inc()
		}
		return
	}
	if b.applyLoggedReply(ctx, j, e, nowMs) {
		return // its consumer answered, and the replica that heard it did not write it
	}
	next, err := kvstore.LeaseExpired(e.Task, nowMs)
	if err != nil {
		return
	}
	b.m.leaseExpired.WithLabelValues(e.Task.BizType).Inc()
	b.commit(ctx, j, e, &next)
}

// commit writes a transition computed from e and reports whether it landed; a lost race is fine
// (the watch brings the winner).
func (b *Bridge) commit(ctx context.Context, j job, e kvstore.Entry, next *kvstore.Task) bool {
	if _, err := b.store.Update(ctx, next, e.Revision); err != nil {
		switch {
		case errors.Is(err, kvstore.ErrConflict), errors.Is(err, kvstore.ErrNotFound):
		case kvstore.Permanent(err) && !b.abandon(ctx, e, "update", err):
		default:
			b.retryLater(job{Kind: j.Kind, ID: j.ID, Rev: e.Revision}, "update", err)
		}
		return false
	}
	b.outage.ok()
	if kvstore.Died(next) {
		b.dead(next)
	}
	return true
}

// retryAt is when a step whose store call failed, or that could not run yet, is tried again.
func (b *Bridge) retryAt() int64 { return addMs(b.cfg.Now().UnixMilli(), retry.Step.Wait(1)) }
