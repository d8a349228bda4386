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

// fire claims a due task by CAS and publishes it to ax.fire.<bizType>. A job marked unsure
// follows a claim of revision j.rev whose outcome was unknown: if that claim landed (the record is
// RUNNING under this replica with j.rev as its token), the attempt is published now, rather than
// left unsent until its lease ends.
func (b *Bridge) fire(ctx context.Context, j job) {
	if j.Unsure && !b.ownsTask(j.ID) && b.alive() {
		// The partition moved since the claim: the claim may have landed all the same, and then
		// its attempt is this replica's to publish (the new owner waits for its lease). Read it
		// back, publish it if so, and claim nothing (review N2).
		if e, ok := b.load(ctx, j); ok && b.ownClaim(&e.Task, j.Rev) {
			b.log.Debug("claim landed after an unknown outcome; its partition moved since", "task_id", j.ID, "attempt", e.Task.Attempt)
			b.fireClaimed(e)
		}
		return
	}
	if !b.ownsTask(j.ID) {
		// Not (or no longer) this replica's partition, or its heartbeats are not confirmed: no
		// read, no claim. The loop keeps the step if it still counts the partition as its own.
		b.report(result{ID: j.ID, Rev: j.Rev, Kind: jobFire, At: b.retryAt(),
			Retry: true, Unsure: j.Unsure})
		return
	}
	e, ok := b.load(ctx, j)
	if !ok {
		return
	}
	t := &e.Task
	switch {
	case j.Unsure && b.ownClaim(t, j.Rev):
		b.log.Debug("claim landed after an unknown outcome", "task_id", t.ID, "attempt", t.Attempt)
		b.fireClaimed(e)
		return
	case e.Revision < j.Rev:
		b.readBehind(j) // the read lags the revision the index has
		return
	case t.Status != kvstore.StatusWaiting:
		return // the watch brings the record's real state to the loop
	}
	nowMs := b.cfg.Now().UnixMilli()
	if b.biz.get(t.BizType).Paused {
		// Paused since the loop took it (or its lane is shared with others): it waits.
		b.report(result{ID: j.ID, Rev: e.Revision, Kind: jobFire, At: addMs(nowMs, time.Second)})
		return
	}
	if t.DueAt > addMs(nowMs, j.Ahead) {
		// Not within the claim-ahead window: the wall clock disagrees with the monotonic one, or
		// the record changed.
		b.report(result{ID: j.ID, Rev: e.Revision, Kind: jobFire, At: t.DueAt})
		return
	}
	// Unsure applies to the revision whose claim had the unknown outcome only: a claim of a newer
	// WAITING revision that conflicts lost to another writer (perhaps this replica's own fire job
	// of that revision), and reading it back would take that claim for this one's.
	unsure := j.Unsure && e.Revision == j.Rev
	if !b.ownsTask(t.ID) { // again: the read may have taken a while
		b.report(result{ID: j.ID, Rev: e.Revision, Kind: jobFire, At: b.retryAt(), Retry: true,
			Unsure: unsure})
		return
	}
	if !b.nc.IsConnected() {
		// A claim written now would wait in the reconnect buffer and land after the outage, with
		// the misfire policy judged by a time long past (a tick of the outage fired under skip):
		// try again once the connection is back.
		b.report(result{ID: j.ID, Rev: e.Revision, Kind: jobFire, At: b.retryAt(), Retry: true, Unsure: unsure})
		return
	}
	next, fire := kvstore.Misfire(e.Task, nowMs) // a one-shot task comes back as it is
	if !fire {
		b.commit(ctx, j, e, &next) // no occurrence for the missed ticks: the series waits for its next
		return
	}
	e.Task = next
	b.claim(ctx, e, unsure, j.Taken)
}

// ownClaim reports whether t runs under this replica's claim of revision rev.
func (b *Bridge) ownClaim(t *kvstore.Task, rev uint64) bool {
	return t.Status == kvstore.StatusRunning && t.Owner == b.cfg.ReplicaID && t.Claim == rev
}

// claim writes the claim of e, a WAITING record, by CAS on its revision, which becomes the claim's
// fencing token. The write is pipelined: the worker moves on, and the fire is published from the
// write's completion. Stop waits for these through b.claims. A claim whose outcome is unknown (a
// timeout, a closed connection: kvstore.Unknown) goes back to the loop as an unsure fire step of e's revision: the
// next try reads the record back and publishes if the claim landed, claims again if it did not.
// unsure says an earlier claim of this revision had an unknown outcome, so a conflict may be that
// claim landing late, and is read back too. A claim written ahead of the task's due time is fired
// at the due time by the loop (fireClaimed); taken, when set, is when the loop took the task, from
// which the claim's latency counts for the claim-ahead window.
func (b *Bridge) claim(ctx context.Context, e kvstore.Entry, unsure bool, taken time.Time) {
	claimed, err := kvstore.Claim(e.Task, b.cfg.Now().UnixMilli(), b.cfg.ReplicaID, e.Revision)
	if err != nil {
		return
	}
	b.claims.Add(1)
	answered := b.out.hold(e.Task.ID, e.Revision, 0)
	b.store.UpdateAsync(ctx, &claimed, e.Revision, func(rev uint64, err error) {
		defer b.claims.Done()
		answered()
		switch {
		case err == nil:
			if !taken.IsZero() {
				b.fired.times.add(time.Since(taken))
			}
			b.fireClaimed(kvstore.Entry{Task: claimed, Revision: rev})
			return
		case errors.Is(err, kvstore.ErrConflict) && unsure:
		case errors.Is(err, kvstore.ErrConflict), errors.Is(err, kvstore.ErrNotFound):
			b.m.members.claimConflicts.Inc()
			return // another replica or an API call got there first; the watch brings its write
		case kvstore.Permanent(err):
			b.m.ack.storeError(opClaim, err)
			b.pipelined.Add(1)
			go func() { // off the goroutine that completes other writes
				defer b.pipelined.Done()
				if b.abandon(context.Background(), e, opClaim, err) {
					b.report(result{ID: e.Task.ID, Rev: e.Revision, Kind: jobFire, Retry: true,
						At: b.retryAt()})
				}
			}()
			return
		default:
			b.storeFailed(opClaim, e.Task.ID, err)
			unsure = unsure || kvstore.Unknown(err)
		}
		b.report(result{ID: e.Task.ID, Rev: e.Revision, Kind: jobFire, Retry: true, Unsure: unsure,
			At: b.retryAt()})
	})
}

// publishFire sends a claimed attempt to ax.fire.<bizType>, if the attempt's lease has not ended
// by this bridge's clock: a replica that was paused (or whose claim took that long) must not fire
// an attempt that another replica may already have retried. The claim itself won its CAS, so
// while its lease runs nobody else fires the task, whoever owns the partition by then. If the
// lease has ended, the attempt is given back uncounted (giveBack); if the publish fails, it
// counts as failed: at-least-once holds. It reports whether it published the attempt.
func (b *Bridge) publishFire(e kvstore.Entry) bool {
	t := &e.Task
	p := kvstore.Partition(t.ID, b.nparts)
	nowMs := b.cfg.Now().UnixMilli()
	switch b.fired.handle(e, nowMs) {
	case handled:
		// A second path to the same landed claim (a read-back racing the claim's own outcome):
		// the attempt went out, or was given back, already.
		b.log.Debug("attempt already published", "task_id", t.ID, "attempt", t.Attempt)
		return false
	case giveItBack:
		b.m.members.fencedFires.Inc()
		b.log.Warn("claimed but not fired: the attempt's lease ended before its fire could go out",
			"task_id", t.ID, "partition", p, "attempt", t.Attempt, "late_ms", nowMs-t.LeaseUntil)
		b.giveBack(e, nowMs)
		return false
	}
	h := fireHeader(t)
	h[HeaderReplica] = []string{b.cfg.ReplicaID}
	h[HeaderFiredAt] = []string{time.UnixMilli(nowMs).UTC().Format(DueAtLayout)} // when the lease was checked
	msg := &nats.Msg{
		Subject: b.cfg.subj.fire + t.BizType,
		Reply:   b.cfg.subj.ackSubject(t.BizType, p, t.Claim, t.ID),
		Data:    t.Payload,
		Header:  h,
	}
	if err := b.nc.PublishMsg(msg); err != nil {
		b.log.Warn("publish fire", "task_id", t.ID, "err", err)
		return false
	}
	b.m.fired.WithLabelValues(t.BizType).Inc()
	late := b.cfg.Now().Sub(time.UnixMilli(t.DueAt))
	b.m.lateness.WithLabelValues(t.BizType).Observe(late.Seconds())
	b.alarm.observe(t.BizType, late)
	return true
}

// giveBack returns an attempt that no consumer received to WAITING, uncounted, by CAS on its
// claim's revision, so that a replica too slow to publish within the lease spends none of the
// task's attempts (issue 24: tasks went DEAD that no consumer had seen). Only a replica whose
// heartbeats are confirmed writes it; if the write loses to the lease's expiry by another replica
// (or fails), the attempt counts as failed, as before.
func (b *Bridge) giveBack(e kvstore.Entry, nowMs int64) {
	if !b.alive() {
		return
	}
	next, err := kvstore.Unclaim(e.Task, e.Task.Claim, nowMs)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeCallTimeout)
	b.pipelined.Add(1)
	b.store.UpdateAsync(ctx, &next, e.Revision, func(_ uint64, err error) {
		defer b.pipelined.Done()
		cancel()
		if err == nil {
			b.m.givenBack.WithLabelValues(e.Task.BizType).Inc()
			return
		}
		b.log.Debug("give back an attempt not fired; its lease's expiry counts it instead", "task_id", e.Task.ID, "err", err)
	})
}

// abandon ends e's task, whose write op the store refused for good (kvstore.Permanent): DEAD with
// a STORE_REFUSED reason and a dead event, rather than a write sent again for ever (review N3). It
// reports whether that write failed for the moment and the caller should try op again later; a
// DEAD write refused for good too leaves the task as it is, logged at Error.
func (b *Bridge) abandon(ctx context.Context, e kvstore.Entry, op string, cause error) (again bool) {
	reason := truncateReason([]byte(CodeStoreRefused + ": the task store refused the " + op + " for good: " + cause.Error()))
	next, err := kvstore.Abandon(e.Task, b.cfg.Now().UnixMilli(), reason)
	if err != nil {
		return false
	}
	wctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	defer cancel()
	_, err = b.store.Update(wctx, &next, e.Revision)
	switch {
	case err == nil:
		b.dead(&next)
	case errors.Is(err, kvstore.ErrConflict), errors.Is(err, kvstore.ErrNotFound):
		// Another write got there first; the watch brings it.
	case kvstore.Permanent(err):
		b.log.Error("the task store refuses every write of this task; it is left as it is and not tried again until a restart",
			"task_id", e.Task.ID, "status", e.Task.Status, "err", err, "what_to_do", "delete its key from the task bucket (nats kv del)")
	default:
		b.storeFailed(op, e.Task.ID, err)
		return true
	}
	return false
}

// fireHeader is the caller's headers plus the bridge's own (subjects.md, "Firing").
func fireHeader(t *kvstore.Task) nats.Header {
	h := make(nats.Header, len(t.Header)+4)
	maps.Copy(h, t.Header)
	h[HeaderTaskID] = []string{t.ID}
	h[HeaderBizType] = []string{t.BizType}
	h[HeaderAttempt] = []string{strconv.Itoa(t.Attempt)}
	h[HeaderDueAt] = []string{time.UnixMilli(t.DueAt).UTC().Format(DueAtLayout)}
	if s := t.Series; s != nil {
		h[HeaderOccurrence] = []string{time.UnixMilli(s.Tick).UTC().Format(DueAtLayout)}
		h[HeaderRun] = []string{strconv.Itoa(s.Run)}
	}
	return h
}

// dead publishes the event for a task that went DEAD: its payload and headers, for a
// dead-letter handler.
func (b *Bridge) dead(t *kvstore.Task) {
	h := fireHeader(t)
	delete(h, HeaderDueAt)
	if s := t.Series; s != nil && t.Status != kvstore.StatusDead { // an occurrence died; the series goes on
		delete(h, HeaderOccurrence)
		h[HeaderAttempt] = []string{strconv.Itoa(s.DeadAttempt)}
		h[HeaderRun] = []string{strconv.Itoa(s.DeadRun)}
	}
	h[HeaderError] = []string{t.LastError}
	if err := b.nc.PublishMsg(&nats.Msg{Subject: b.cfg.subj.dead + t.BizType, Data: t.Payload, Header: h}); err != nil {
		b.log.Warn("publish dead event", "task_id", t.ID, "err", err)
	}
	b.m.dead.WithLabelValues(t.BizType).Inc()
	b.log.Info("task dead", "task_id", t.ID, "biz_type", t.BizType, "attempt", t.Attempt, "reason", t.LastError)
}
