package bridge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/kvstore"
)

// The ack log (subjects.md, "The ack log"): a stream that captures every consumer reply on
// ax.ack.>, whoever receives it. A replica that received an ack and died before writing it leaves
// the ack there, and the replica that ends the attempt's lease applies it (applyLoggedReply)
// instead of retrying a task its consumer already settled. The log is in memory on one server:
// on file and R3 it cost a 3-node burst a fifth of its time (bench/README.md, "The ack log's storage").

const (
	// DefaultAckLogMaxAge is Config.AckLogMaxAge when it is 0.
	DefaultAckLogMaxAge = 2 * time.Minute
	// ackLogMaxBytes bounds the ack log; past it the oldest replies go first.
	ackLogMaxBytes = 256 << 20
	// ackLogTimeout bounds one lookup: a log that does not answer delays a retry no longer.
	ackLogTimeout = 500 * time.Millisecond
)

// ackLog is the stream, or nil stream when there is none (Config.NoAckLog, or it could not be
// opened). Set by the acks service's Start; read by the workers.
type ackLog struct {
	stream jetstream.Stream
}

// openAckLog opens the ack log, creating it if missing. A log that cannot be opened (the user
// lacks the permissions of permissions.md) is logged and done without; one that would answer the
// consumers' publishes is refused, since an AckSync() would take its answer for the bridge's.
func (b *Bridge) openAckLog(ctx context.Context, cfg acksConfig) error {
	if cfg.NoLog {
		return nil
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	name := cfg.Log
	s, err := b.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = b.js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        name,
			Description: "ax bridge ack log: consumer replies, kept so that a replica's death loses none",
			Subjects:    []string{b.cfg.subj.ack + ">"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.MemoryStorage, // for a bridge's death, not a server's: no fsync, no raft
			Replicas:    1,
			MaxAge:      cfg.LogMaxAge,
			MaxBytes:    ackLogMaxBytes,
			Discard:     jetstream.DiscardOld,
			NoAck:       true,
			AllowDirect: true,
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			s, err = b.js.Stream(ctx, name)
		}
	}
	if err != nil {
		b.log.Warn("no ack log: an ack that reaches a replica which dies before writing it is lost, and its attempt retried",
			"stream", name, "err", err)
		return nil
	}
	if !s.CachedInfo().Config.NoAck {
		return fmt.Errorf("bridge: ack log %s answers publishes (no_ack is false): a consumer's AckSync() would take the stream's answer for the bridge's", name)
	}
	b.acklog.stream = s
	return nil
}

// last returns the latest reply logged on subject, if any.
func (l *ackLog) last(ctx context.Context, subject string) (*jetstream.RawStreamMsg, bool) {
	if l.stream == nil {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, ackLogTimeout)
	defer cancel()
	m, err := l.stream.GetLastMsgForSubject(ctx, subject)
	return m, err == nil
}

// applyLoggedReply settles an attempt whose lease ended by the consumer's last reply to it in the
// ack log, if there is one that still applies: an ack, a term or a nak as the replica that
// received it would have written it, at the time it was logged, or a +WPI whose extension still
// runs. It reports whether it took the step (a write that fails is retried as the lease's step).
func (b *Bridge) applyLoggedReply(ctx context.Context, j job, e kvstore.Entry, nowMs int64) bool {
	t := &e.Task
	p := kvstore.Partition(t.ID, b.nparts)
	m, ok := b.acklog.last(ctx, b.cfg.subj.ackSubject(t.BizType, p, t.Claim, t.ID))
	if !ok {
		return false
	}
	op := &ackOp{addr: ackAddr{bizType: t.BizType, partition: p, token: t.Claim, id: t.ID},
		body: parseAckBody(m.Data), reason: "nak"}
	next, err := op.transition(*t, m.Time.UnixMilli())
	if err != nil || next.Status == kvstore.StatusRunning && next.LeaseUntil <= nowMs {
		return false
	}
	b.log.Debug("attempt settled by its logged reply", "task_id", t.ID, "attempt", t.Attempt, "status", next.Status)
	if b.commit(ctx, j, e, &next) {
		b.m.fromLog.WithLabelValues(t.BizType).Inc()
	}
	return true
}
