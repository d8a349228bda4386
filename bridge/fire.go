package bridge

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/kvstore"
)

// fire claims a due task by CAS and publishes it to ax.fire.<bizType>.
func (b *Bridge) fire(ctx context.Context, j job) {
	e, ok := b.load(ctx, j)
	if !ok {
		return
	}
	t := &e.Task
	if t.Status != kvstore.StatusWaiting {
		return // the watch brings the record's real state to the loop
	}
	nowMs := b.cfg.Now().UnixMilli()
	if t.DueAt > nowMs {
		// Never early: the wall clock disagrees with the monotonic one, or the record changed.
		b.report(result{id: j.id, rev: e.Revision, kind: jobFire, at: t.DueAt})
		return
	}
	b.claim(ctx, e, 0)
}

// errClaimNotLanded: claims of a WAITING record failed claimRounds times without landing.
var errClaimNotLanded = errors.New("claim did not land")

// claimRounds bounds how often claim tries again, on its own, a claim whose write did not land.
const claimRounds = 3

// claim writes the claim of e, a WAITING record, by CAS on its revision, which becomes the claim's
// fencing token. The write is pipelined: the caller moves on, and the fire is published from the
// write's completion. Stop waits for these through b.claims. round counts the claims of e
// already tried.
func (b *Bridge) claim(ctx context.Context, e kvstore.Entry, round int) {
	claimed, err := kvstore.Claim(e.Task, b.cfg.Now().UnixMilli(), b.cfg.ReplicaID, e.Revision)
	if err != nil {
		return
	}
	b.claims.Add(1)
	b.store.UpdateAsync(ctx, &claimed, e.Revision, func(rev uint64, err error) {
		defer b.claims.Done()
		switch {
		case err == nil:
			b.publishFire(kvstore.Entry{Task: claimed, Revision: rev})
			return
		case errors.Is(err, kvstore.ErrConflict) && round > 0:
			// The earlier claim of this revision, whose outcome was unknown, may have landed late
			// (a publish held over a reconnect): read back, as for an unknown outcome.
		case errors.Is(err, kvstore.ErrConflict), errors.Is(err, kvstore.ErrNotFound):
			return // another replica or an API call got there first; the watch brings its write
		default:
			b.storeFailed(opClaim, e.Task.ID, err)
		}
		b.claims.Add(1)
		go func() { // not on this goroutine: it completes other writes
			defer b.claims.Done()
			if b.fired.acquire(ctx) {
				defer b.fired.release()
				b.settleClaim(ctx, e, &claimed, round)
			}
		}()
	})
}

// settleClaim finds out, by reading the record back, what became of a claim whose write failed
// without a definite answer (a timeout, a closed connection): it may have landed. RUNNING under
// this replica with the token written: it landed, and this replica fires the attempt now rather
// than let its lease run out unsent. Still the WAITING revision: it did not land; claim again. Any
// other record: someone else moved the task, and the watch brings it. Reads are retried with a
// bounded back-off until the claim's lease would have ended (then lease expiry takes over) or ctx
// ends.
func (b *Bridge) settleClaim(ctx context.Context, from kvstore.Entry, claimed *kvstore.Task, round int) {
	var wait retryWait
	for {
		e, err := b.getBounded(ctx, from.Task.ID)
		switch {
		case errors.Is(err, kvstore.ErrNotFound):
			return
		case err != nil:
			b.storeFailed(opClaimRead, from.Task.ID, err)
			if b.cfg.Now().UnixMilli() >= claimed.LeaseUntil || !wait.next(ctx) {
				return
			}
			continue
		}
		t := &e.Task
		switch {
		case t.Status == kvstore.StatusRunning && t.Owner == b.cfg.ReplicaID && t.Claim == claimed.Claim:
			b.log.Debug("claim landed after an unknown outcome", "task_id", t.ID, "attempt", t.Attempt)
			b.publishFire(e)
		case e.Revision == from.Revision && round+1 < claimRounds:
			b.claim(ctx, e, round+1)
		case e.Revision == from.Revision:
			b.retryLater(job{kind: jobFire, id: t.ID, rev: e.Revision}, "claim", errClaimNotLanded)
		}
		return
	}
}

// publishFire sends a claimed attempt to ax.fire.<bizType>. If the publish fails, the lease runs
// out and the attempt counts as failed: at-least-once holds.
func (b *Bridge) publishFire(e kvstore.Entry) {
	t := &e.Task
	b.fired.put(e)
	msg := &nats.Msg{
		Subject: FirePrefix + t.BizType,
		Reply:   ackSubject(t.BizType, b.cfg.ReplicaID, t.Claim, t.ID),
		Data:    t.Payload,
		Header:  fireHeader(t),
	}
	if err := b.nc.PublishMsg(msg); err != nil {
		b.log.Warn("publish fire", "task_id", t.ID, "err", err)
		return
	}
	b.m.fired.WithLabelValues(t.BizType).Inc()
	b.m.lateness.WithLabelValues(t.BizType).Observe(b.cfg.Now().Sub(time.UnixMilli(t.DueAt)).Seconds())
}

// fireHeader is the caller's headers plus the bridge's own (subjects.md, "Firing").
func fireHeader(t *kvstore.Task) nats.Header {
	h := make(nats.Header, len(t.Header)+4)
	maps.Copy(h, t.Header)
	h[HeaderTaskID] = []string{t.ID}
	h[HeaderBizType] = []string{t.BizType}
	h[HeaderAttempt] = []string{strconv.Itoa(t.Attempt)}
	h[HeaderDueAt] = []string{time.UnixMilli(t.DueAt).UTC().Format(DueAtLayout)}
	return h
}

// dead publishes the event for a task that went DEAD: its payload and headers, for a
// dead-letter handler.
func (b *Bridge) dead(t *kvstore.Task) {
	h := fireHeader(t)
	delete(h, HeaderDueAt)
	h[HeaderError] = []string{t.LastError}
	if err := b.nc.PublishMsg(&nats.Msg{Subject: DeadPrefix + t.BizType, Data: t.Payload, Header: h}); err != nil {
		b.log.Warn("publish dead event", "task_id", t.ID, "err", err)
	}
	b.m.dead.WithLabelValues(t.BizType).Inc()
	b.log.Info("task dead", "task_id", t.ID, "biz_type", t.BizType, "attempt", t.Attempt, "reason", t.LastError)
}
