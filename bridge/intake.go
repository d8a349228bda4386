package bridge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/kvstore"
)

// Intake consumer settings the bridge creates the consumer with. An operator may tune an
// existing consumer; the bridge then keeps the operator's values (checkConsumer warns).
// intakeAckWait bounds how late a schedule held by a bridge that died comes back to the others:
// a handler takes at most a store timeout (5 s) before it acks or naks its message.
const (
	intakeAckWait       = 10 * time.Second
	intakeAckWaitBefore = 30 * time.Second // what bridges before it created consumers with
	intakeMaxAckPending = 20000
	intakePullMax       = 2000
)

// Bounds of the delay before a schedule message whose store write failed comes back, doubling
// with each delivery.
const (
	intakeRetryMin = time.Second
	intakeRetryMax = 30 * time.Second
)

// opCreate is the create of a task record, in ax_store_errors_total{op}.
const opCreate = "create"

// ensureIntake makes sure the stream that captures ax.schedule.> and the shared durable consumer
// exist, so that a plain publish is durable even while no bridge runs. A new stream has limits
// retention: an ack is not a removal (no write of its own), and the housekeeper purges what the
// consumer has acked (intake_purge.go). An existing stream that could drop accepted schedules is
// refused; an existing consumer is used as the operator left it.
func (b *Bridge) ensureIntake(ctx context.Context) (jetstream.Consumer, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	stream, err := b.js.Stream(ctx, b.cfg.Stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		_, err = b.js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        b.cfg.Stream,
			Description: "ax bridge intake: schedule messages wait here until a bridge has stored them as tasks",
			Subjects:    []string{b.cfg.subj.schedule + ">"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    b.cfg.StreamReplicas,
			MaxMsgs:     intakeMaxMsgs,
			Discard:     jetstream.DiscardNew,
		})
		if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil, fmt.Errorf("bridge: create stream %s: %w", b.cfg.Stream, err)
		}
	case err != nil:
		return nil, fmt.Errorf("bridge: look up stream %s: %w", b.cfg.Stream, err)
	default:
		if err := b.checkStream(stream.CachedInfo().Config); err != nil {
			return nil, err
		}
	}

	cons, err := b.js.Consumer(ctx, b.cfg.Stream, b.cfg.Consumer)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		cons, err = b.js.CreateConsumer(ctx, b.cfg.Stream, jetstream.ConsumerConfig{
			Durable:       b.cfg.Consumer,
			Description:   "ax bridge replicas share this consumer",
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       intakeAckWait,
			MaxAckPending: intakeMaxAckPending,
			// No max deliver: the server never gives a message up, which would leave it
			// unsettled below the ack floor, where a purge removes it. The bridge bounds the
			// deliveries itself (Config.IntakeMaxDeliver): at its last one it refuses a message
			// it cannot store, and acks it.
			MaxDeliver:    -1,
			FilterSubject: b.cfg.subj.schedule + ">",
		})
		if errors.Is(err, jetstream.ErrConsumerExists) { // another replica was first
			cons, err = b.js.Consumer(ctx, b.cfg.Stream, b.cfg.Consumer)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("bridge: consumer %s on %s: %w", b.cfg.Consumer, b.cfg.Stream, err)
	}
	if err := b.checkConsumer(cons.CachedInfo().Config); err != nil {
		return nil, err
	}
	b.replay.consumer(cons.CachedInfo())
	return cons, nil
}

// intakeDeliverSpare is, for an intake consumer an operator gave a max deliver, how many
// deliveries before that limit the bridge settles a message it cannot store: a bridge that dies
// during that delivery leaves the message to the next one, rather than to the server's advisory
// with no delivery left. (The consumer the bridge creates has no max deliver.)
const intakeDeliverSpare = 2

// checkStream refuses an existing intake stream that could lose schedule messages before a bridge
// has stored them. Its retention is the housekeeper's concern (intake_purge.go): a work-queue
// stream works as it is, and the housekeeper says once what it costs.
func (b *Bridge) checkStream(sc jetstream.StreamConfig) error {
	var errs []string
	if !b.cfg.subj.coversSchedule(sc.Subjects) {
		errs = append(errs, fmt.Sprintf("its subjects %q do not capture %s>, so schedules published there are not kept", sc.Subjects, b.cfg.subj.schedule))
	}
	if sc.MaxAge > 0 {
		errs = append(errs, fmt.Sprintf("max age %v would expire schedules that no bridge has stored yet", sc.MaxAge))
	}
	if sc.Discard == jetstream.DiscardOld && (sc.MaxMsgs > 0 || sc.MaxBytes > 0 || sc.MaxMsgsPerSubject > 0) {
		errs = append(errs, "its limits (max msgs, max bytes or max msgs per subject) discard old messages, which drops accepted schedules; use discard new")
	}
	if len(errs) > 0 {
		return fmt.Errorf("bridge: stream %s could drop accepted schedules: %s (fix it with `nats stream edit %s`, or name another --stream)",
			b.cfg.Stream, strings.Join(errs, "; "), b.cfg.Stream)
	}
	return nil
}

// checkConsumer refuses a consumer that cannot work as the intake consumer and warns where an
// operator's settings differ from the bridge's own.
func (b *Bridge) checkConsumer(cc jetstream.ConsumerConfig) error {
	if cc.AckPolicy != jetstream.AckExplicitPolicy {
		return fmt.Errorf("bridge: consumer %s on %s has ack policy %s; the bridge needs explicit acks (delete the consumer and the bridge creates it)",
			b.cfg.Consumer, b.cfg.Stream, cc.AckPolicy)
	}
	filters := cc.FilterSubjects
	if cc.FilterSubject != "" {
		filters = append(filters, cc.FilterSubject)
	}
	if len(filters) > 0 && !b.cfg.subj.coversSchedule(filters) {
		b.log.Warn("intake consumer filters out some schedule subjects; those messages are never stored",
			"consumer", b.cfg.Consumer, "filters", filters)
	}
	if cc.MaxDeliver > 0 {
		// Kept, not refused (the bridge works with it), but not purged: a message that used
		// up the server's deliveries unsettled lies below the ack floor (purgeUnsafe).
		b.log.Warn("intake consumer has a max deliver: the server gives up a message a bridge stopped during each of its last deliveries; the bridge refuses a message it cannot store two deliveries before that limit, and the housekeeper does not purge a limits intake stream while the consumer has one",
			"consumer", b.cfg.Consumer, "max_deliver", cc.MaxDeliver, "bridge_max_deliver", b.cfg.IntakeMaxDeliver,
			"what_to_do", fmt.Sprintf("nats consumer edit %s %s --max-deliver=-1", b.cfg.Stream, b.cfg.Consumer))
	}
	if cc.AckWait != intakeAckWait && cc.AckWait != intakeAckWaitBefore || cc.MaxAckPending != intakeMaxAckPending {
		b.log.Info("intake consumer tuned by an operator; kept as it is",
			"consumer", b.cfg.Consumer, "ack_wait", cc.AckWait.String(), "max_ack_pending", cc.MaxAckPending)
	}
	maxDeliver := b.cfg.IntakeMaxDeliver
	if cc.MaxDeliver > 0 {
		maxDeliver = min(maxDeliver, max(cc.MaxDeliver-intakeDeliverSpare, 1))
	}
	b.maxDeliver.Store(int64(maxDeliver))
	return nil
}

// coversSchedule reports whether the subject filters capture every subject under <prefix>.schedule.>.
func (s subjects) coversSchedule(filters []string) bool {
	want := strings.Split(s.schedule+">", ".")
	for _, f := range filters {
		toks := strings.Split(f, ".")
		for i, tok := range toks {
			if tok == ">" {
				return true
			}
			if i >= len(want)-1 || (tok != "*" && tok != want[i]) {
				break
			}
		}
	}
	return false
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
	if !b.intakeAdd() {
		return // stopping: the message comes back after its ack wait, to this or another replica
	}
	if md.NumDelivered > 1 {
		b.m.intake.redeliveries.Inc()
	}
	m := scheduleMsg{subject: msg.Subject(), header: msg.Headers(), payload: msg.Data(), accepted: md.Timestamp, seq: md.Sequence.Stream}
	task, rej := b.cfg.parseSchedule(m, b.recordLimit())
	if rej == nil && b.staleReplay(md) {
		rej = reject(CodeStaleReplay,
			"the message was in the intake stream before its consumer was created, and is older than the task retention: its task may have run and retired, so it is not stored again (publish it anew to schedule the task again)")
	}
	if rej != nil {
		b.rejectMsg(m, rej)
		_ = msg.Ack()
		b.intake.Done()
		return
	}
	b.store.CreateAsync(context.Background(), &task, func(existing kvstore.Entry, err error) {
		defer b.intake.Done()
		b.created(msg, md, m, &task, existing, err)
	})
}

// created settles one intake message from its create's outcome.
func (b *Bridge) created(msg jetstream.Msg, md *jetstream.MsgMetadata, m scheduleMsg, task *kvstore.Task, existing kvstore.Entry, err error) {
	if err == nil || errors.Is(err, kvstore.ErrExists) {
		b.intakeOutage.ok(b)
	}
	switch {
	case err == nil:
		b.m.scheduled.WithLabelValues(task.BizType).Inc()
		_ = msg.Ack()
		b.warnDST(task)
		// Index the new task now rather than when the watch brings it: after a restart the watch
		// brings new records only behind the whole initial load.
		b.report(result{Created: &existing})
	case errors.Is(err, kvstore.ErrExists):
		switch {
		case sameContent(&existing.Task, task):
			b.duplicate(m, task.ID, existing.Task.Status)
		case m.header.Get(HeaderReplace) == "true":
			b.replace(msg, m, task, existing)
			return
		default:
			b.rejectMsg(m, reject(CodeDuplicateConflict,
				"task %q exists with different content (bizType, payload, headers or retry policy); the first one stays (%s: true replaces it)", task.ID, HeaderReplace))
		}
		_ = msg.Ack()
	case kvstore.Permanent(err):
		b.m.ack.storeError(opCreate, err)
		b.rejectMsg(m, reject(CodeStoreRefused, "the task store refused the task: %v", err))
		_ = msg.Ack()
	default:
		b.m.ack.storeError(opCreate, err)
		b.intakeOutage.failed(b, err)
		if int64(md.NumDelivered) >= b.maxDeliver.Load() {
			b.rejectMsg(m, reject(CodeStoreUnavailable,
				"the task store failed on all %d deliveries of this message (last: %v); the task was not stored, or its write timed out (look it up with %s.get)",
				md.NumDelivered, err, b.cfg.subj.api))
			_ = msg.Term()
			return
		}
		// Leave the message in the stream; it comes back after a delay that grows with each
		// delivery, so a store outage costs little and a message cannot hold its slot forever.
		_ = msg.NakWithDelay(intakeRetryDelay(md.NumDelivered))
	}
}

// intakeRetryDelay is the delay before delivery n+1 of a message whose store write failed on
// delivery n: 1s, 2s, 4s, ... up to 30s.
func intakeRetryDelay(n uint64) time.Duration {
	if n < 1 {
		n = 1
	}
	if n > 6 {
		return intakeRetryMax
	}
	return min(intakeRetryMin<<(n-1), intakeRetryMax)
}

// recordLimit is the largest message (value and headers) the connection's server takes.
func (b *Bridge) recordLimit() int {
	return max(int(b.nc.MaxPayload()), 1)
}

// intakeAdd counts a schedule message in flight, unless Stop has stopped intake.
func (b *Bridge) intakeAdd() bool {
	b.intakeMu.Lock()
	defer b.intakeMu.Unlock()
	if b.intakeClosed {
		return false
	}
	b.intake.Add(1)
	return true
}

// closeIntake makes intakeAdd refuse from now on; then b.intake.Wait is safe.
func (b *Bridge) closeIntake() {
	b.intakeMu.Lock()
	b.intakeClosed = true
	b.intakeMu.Unlock()
}

// storeOutage logs a store outage once when it begins and once when it ends, with a count,
// instead of once per message. The success path costs one atomic load.
type storeOutage struct {
	down     atomic.Bool
	mu       sync.Mutex
	since    time.Time
	failures int
}

func (o *storeOutage) failed(b *Bridge, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failures++
	if !o.down.Load() {
		o.down.Store(true)
		o.since, o.failures = b.cfg.Now(), 1
		b.log.Warn("task store unavailable; schedule messages are retried with backoff", "err", err)
	}
}

func (o *storeOutage) ok(b *Bridge) {
	if !o.down.Load() {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.down.Load() {
		b.log.Info("task store available again", "failed_writes", o.failures, "outage", b.cfg.Now().Sub(o.since).String())
		o.down.Store(false)
	}
}

// rejectMsg reports a refused schedule message on ax.rejected.<bizType> and counts it.
// The payload is neither echoed nor logged.
func (b *Bridge) rejectMsg(m scheduleMsg, rej *rejection) {
	biz := b.cfg.subj.bizTypeOf(m.subject)
	out := nats.NewMsg(b.cfg.subj.rejected + biz)
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
	biz := b.cfg.subj.bizTypeOf(m.subject)
	out := nats.NewMsg(b.cfg.subj.duplicate + biz)
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
func (s subjects) bizTypeOf(subject string) string {
	if biz, ok := s.cutSchedule(subject); ok {
		return biz
	}
	return InvalidBizType
}

func (s subjects) cutSchedule(subject string) (string, bool) {
	biz, ok := strings.CutPrefix(subject, s.schedule)
	if !ok {
		return "", false
	}
	return biz, validBizType(biz)
}

// withDefaultTimeout bounds ctx by 10s when it has no deadline.
func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, 10*time.Second)
}

// replace writes task over existing, a record of its id with other content, for a message with
// Ax-Replace: true, by CAS on existing's revision: a WAITING or finished task is replaced (a
// series starts anew from the new spec); a RUNNING one is refused, as its attempt is out. A
// conflict means the record changed meanwhile: the message is refused, to be sent again.
func (b *Bridge) replace(msg jetstream.Msg, m scheduleMsg, task *kvstore.Task, existing kvstore.Entry) {
	if existing.Task.Status == kvstore.StatusRunning {
		b.rejectMsg(m, reject(CodeReplaceRunning,
			"task %q is running an attempt; %s replaces a waiting or finished task: send it again once the attempt settles", task.ID, HeaderReplace))
		_ = msg.Ack()
		return
	}
	next := *task
	b.intake.Add(1)
	b.store.UpdateAsync(context.Background(), &next, existing.Revision, func(rev uint64, err error) {
		defer b.intake.Done()
		switch {
		case err == nil:
			b.m.scheduled.WithLabelValues(task.BizType).Inc()
			_ = msg.Ack()
			b.log.Info("task replaced", "task_id", task.ID, "was", existing.Task.Status)
			b.report(result{Created: &kvstore.Entry{Task: next, Revision: rev}})
			b.warnDST(&next)
		case errors.Is(err, kvstore.ErrConflict), errors.Is(err, kvstore.ErrNotFound):
			b.rejectMsg(m, reject(CodeDuplicateConflict, "task %q changed while it was being replaced; send the message again", task.ID))
			_ = msg.Ack()
		default:
			b.m.ack.storeError(opCreate, err)
			_ = msg.NakWithDelay(intakeRetryDelay(1))
		}
	})
}
