package bridge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/kvstore"
)

// ensureIntake makes sure the stream that captures ax.schedule.> and the shared durable consumer
// exist, so that a plain publish is durable even while no bridge runs.
func (b *Bridge) ensureIntake(ctx context.Context) (jetstream.Consumer, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	scfg := jetstream.StreamConfig{
		Name:        b.cfg.Stream,
		Description: "ax bridge intake: schedule messages wait here until a bridge has stored them as tasks",
		Subjects:    []string{SchedulePrefix + ">"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    b.cfg.StreamReplicas,
		Discard:     jetstream.DiscardNew,
	}
	if _, err := b.js.Stream(ctx, b.cfg.Stream); errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := b.js.CreateStream(ctx, scfg); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil, fmt.Errorf("bridge: create stream %s: %w", b.cfg.Stream, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("bridge: look up stream %s: %w", b.cfg.Stream, err)
	}
	cons, err := b.js.CreateOrUpdateConsumer(ctx, b.cfg.Stream, jetstream.ConsumerConfig{
		Durable:       b.cfg.Consumer,
		Description:   "ax bridge replicas share this consumer",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: 20000,
		FilterSubject: SchedulePrefix + ">",
	})
	if err != nil {
		return nil, fmt.Errorf("bridge: consumer %s on %s: %w", b.cfg.Consumer, b.cfg.Stream, err)
	}
	return cons, nil
}

// onSchedule handles one intake message. It runs on the consumer's goroutine and never waits
// for the store: the create is pipelined and the message is acked from its completion.
func (b *Bridge) onSchedule(msg jetstream.Msg) {
	md, err := msg.Metadata()
	if err != nil {
		b.log.Warn("intake message without metadata", "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return
	}
	m := scheduleMsg{subject: msg.Subject(), header: msg.Headers(), payload: msg.Data(), accepted: md.Timestamp, seq: md.Sequence.Stream}
	task, rej := b.cfg.parseSchedule(m)
	if rej != nil {
		b.rejectMsg(m, rej)
		_ = msg.Ack()
		return
	}
	b.intake.Add(1)
	b.store.CreateAsync(context.Background(), &task, func(existing kvstore.Entry, err error) {
		defer b.intake.Done()
		switch {
		case err == nil:
			b.m.scheduled.WithLabelValues(task.BizType).Inc()
			_ = msg.Ack()
		case errors.Is(err, kvstore.ErrExists):
			if sameContent(&existing.Task, &task) {
				b.duplicate(m, task.ID, existing.Task.Status)
			} else {
				b.rejectMsg(m, reject(CodeDuplicateConflict,
					"task %q exists with different content (bizType, payload, headers or retry policy); the first one stays", task.ID))
			}
			_ = msg.Ack()
		default:
			// The store is unavailable: leave the message in the stream and try again later.
			b.log.Warn("store task failed; will retry", "task_id", task.ID, "biz_type", task.BizType, "err", err)
			_ = msg.NakWithDelay(time.Second)
		}
	})
}

// rejectMsg reports a refused schedule message on ax.rejected.<bizType> and counts it.
// The payload is neither echoed nor logged.
func (b *Bridge) rejectMsg(m scheduleMsg, rej *rejection) {
	biz := bizTypeOf(m.subject)
	out := nats.NewMsg(RejectedPrefix + biz)
	out.Header.Set(HeaderErrorCode, rej.code)
	out.Header.Set(HeaderError, rej.reason)
	out.Header.Set(HeaderSubject, m.subject)
	if id, ok := m.header[HeaderTaskID]; ok {
		out.Header[HeaderTaskID] = id
	}
	if err := b.nc.PublishMsg(out); err != nil {
		b.log.Warn("publish rejection", "err", err)
	}
	b.m.rejected.WithLabelValues(biz, rej.code).Inc()
	b.log.Info("schedule rejected", "subject", m.subject, "task_id", m.header.Get(HeaderTaskID), "code", rej.code, "reason", rej.reason)
}

func (b *Bridge) duplicate(m scheduleMsg, id string, status kvstore.Status) {
	biz := bizTypeOf(m.subject)
	out := nats.NewMsg(DuplicatePrefix + biz)
	out.Header.Set(HeaderTaskID, id)
	out.Header.Set(HeaderSubject, m.subject)
	out.Header.Set(HeaderStatus, string(status))
	if err := b.nc.PublishMsg(out); err != nil {
		b.log.Warn("publish duplicate", "err", err)
	}
	b.m.duplicates.WithLabelValues(biz).Inc()
	b.log.Debug("duplicate schedule", "task_id", id, "biz_type", biz)
}

// bizTypeOf is the bizType token for events about a schedule subject, or InvalidBizType.
func bizTypeOf(subject string) string {
	if biz, ok := cutSchedule(subject); ok {
		return biz
	}
	return InvalidBizType
}

func cutSchedule(subject string) (string, bool) {
	if len(subject) <= len(SchedulePrefix) || subject[:len(SchedulePrefix)] != SchedulePrefix {
		return "", false
	}
	biz := subject[len(SchedulePrefix):]
	return biz, validBizType(biz)
}

// withDefaultTimeout bounds ctx by 10s when it has no deadline.
func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, 10*time.Second)
}
