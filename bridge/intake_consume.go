package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/retry"
)

// runIntakeFrom consumes schedule messages until ctx ends, starting with cc (consuming cons; nil
// when the first Consume failed), and starting again whenever consuming ends by itself: nats.go
// ends Consume for good when the consumer (or its stream) is deleted, and a consumer that vanished
// while the connection was down is found from the missed heartbeats. Each restart makes sure the
// stream and consumer exist (ensureIntake), with a Warn log and ax_intake_restarts_total. When ctx
// ends, the current consume is drained: messages already delivered are handled, no more are
// fetched. It closes b.intakeEnd when it returns.
func (b *Bridge) runIntakeFrom(ctx context.Context, cons jetstream.Consumer, cc jetstream.ConsumeContext) {
	defer close(b.intakeEnd)
	wait := retry.Backoff{Policy: retry.Intake}
	for {
		if cc != nil {
			if !b.consumeUntilEnd(ctx, cc, cons) {
				return
			}
			cc = nil
		}
		if b.nc.IsClosed() {
			b.log.Error("intake stopped: the NATS connection is closed")
			return
		}
		if !wait.Next(ctx) {
			return
		}
		var err error
		if cons, err = b.ensureIntake(ctx); err == nil {
			cc, err = b.consume(cons)
		}
		if err != nil {
			if ctx.Err() == nil {
				b.log.Warn("intake: setting up again failed; retrying", "stream", b.cfg.Stream, "consumer", b.cfg.Consumer, "err", err)
			}
			continue
		}
		wait.Reset()
		b.m.intake.restarts.Inc()
		b.log.Warn("intake set up again; taking schedule messages", "stream", b.cfg.Stream, "consumer", b.cfg.Consumer)
	}
}

// consume starts consuming with an error handler that passes suspicious errors to b.intakeErrs.
func (b *Bridge) consume(cons jetstream.Consumer) (jetstream.ConsumeContext, error) {
	cc, err := cons.Consume(b.onSchedule, jetstream.PullMaxMessages(intakePullMax),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			switch {
			case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrBadRequest):
				b.log.Warn("intake consumer gone", "consumer", b.cfg.Consumer, "err", err)
			case errors.Is(err, jetstream.ErrNoHeartbeat), errors.Is(err, jetstream.ErrConsumerNotFound),
				errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrConsumerLeadershipChanged):
				b.log.Debug("intake consumer", "err", err)
				select {
				case b.intakeErrs <- err:
				default:
				}
			default:
				b.log.Debug("intake consumer", "err", err)
			}
		}))
	if err != nil {
		return nil, err
	}
	return cc, nil
}

// consumeUntilEnd waits until cc ends by itself (true: start again) or ctx ends (false, after
// draining cc). A suspicious consumer error makes it check that the consumer still exists.
func (b *Bridge) consumeUntilEnd(ctx context.Context, cc jetstream.ConsumeContext, cons jetstream.Consumer) bool {
	for {
		select {
		case <-ctx.Done():
			cc.Drain()
			<-cc.Closed() // handlers only start pipelined writes: a drain is short
			return false
		case <-cc.Closed():
			b.log.Warn("intake consuming ended; setting it up again", "stream", b.cfg.Stream, "consumer", b.cfg.Consumer)
			return true
		case <-b.intakeErrs:
			if b.consumerGone(ctx, cons) {
				cc.Stop()
				b.log.Warn("intake consumer or stream no longer exists; setting it up again", "stream", b.cfg.Stream, "consumer", b.cfg.Consumer)
				return true
			}
		}
	}
}

// consumerGone reports whether the server says the consumer or its stream does not exist.
func (b *Bridge) consumerGone(ctx context.Context, cons jetstream.Consumer) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := cons.Info(ctx)
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound)
}

// maxDeliveriesAdvisory is the server's advisory for a message that used up the intake consumer's
// MaxDeliver without being settled. The consumer the bridge creates has none; an operator's may:
// the bridge settles every message two deliveries before it, so the advisory means a bridge stopped
// or crashed during each of the last ones, and no consumer delivers the message again. It stays
// in the stream: a limits stream is not purged while its consumer has a max deliver (purgeUnsafe).
const maxDeliveriesAdvisory = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."

// watchMaxDeliveries logs and counts max-deliveries advisories of the intake consumer.
func (b *Bridge) watchMaxDeliveries() (*nats.Subscription, error) {
	return b.nc.Subscribe(maxDeliveriesAdvisory+b.cfg.Stream+"."+b.cfg.Consumer, func(m *nats.Msg) {
		var adv struct {
			StreamSeq  uint64 `json:"stream_seq"`
			Deliveries uint64 `json:"deliveries"`
		}
		_ = json.Unmarshal(m.Data, &adv)
		b.m.intake.maxDeliveries.Inc()
		b.log.Warn("intake message used up its deliveries without being settled; it is not delivered again and waits in the intake stream (the consumer's max deliver: subjects.md, \"The intake stream\")",
			"stream", b.cfg.Stream, "stream_seq", adv.StreamSeq, "deliveries", adv.Deliveries)
	})
}
