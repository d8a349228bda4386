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
	claimed, err := kvstore.Claim(*t, nowMs, b.cfg.ReplicaID)
	if err != nil {
		return
	}
	// The claim is pipelined: the worker moves on, and the fire is published from the write's
	// completion. Stop waits for these through b.pipelined.
	b.pipelined.Add(1)
	b.store.UpdateAsync(ctx, &claimed, e.Revision, func(rev uint64, err error) {
		defer b.pipelined.Done()
		if err != nil {
			if !errors.Is(err, kvstore.ErrConflict) && !errors.Is(err, kvstore.ErrNotFound) {
				b.retryLater(job{kind: jobFire, id: j.id, rev: e.Revision}, "claim", err)
			}
			return // another replica or an API call got there first
		}
		b.publishFire(kvstore.Entry{Task: claimed, Revision: rev})
	})
}

// publishFire sends a claimed attempt to ax.fire.<bizType>. If the publish fails, the lease runs
// out and the attempt counts as failed: at-least-once holds.
func (b *Bridge) publishFire(e kvstore.Entry) {
	t := &e.Task
	b.fired.put(e)
	msg := &nats.Msg{
		Subject: FirePrefix + t.BizType,
		Reply:   ackSubject(b.cfg.ReplicaID, t.Attempt, t.ID),
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
