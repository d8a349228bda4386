package bridge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The intake stream the bridge creates has limits retention: acking a schedule message does not
// remove it (on a work-queue stream each ack is a removal, a write of its own: an fsync under
// sync_interval: always), and the consumer writes its ack state at most about ten times a second.
// The housekeeper removes what is acked instead, every intakePurgeEvery: it purges the messages
// below the intake consumer's ack floor. The bridge acks a schedule message only once its record
// is durable (or once it has refused the message for good), so everything below the floor is
// settled, and nothing not yet stored is removed.
const (
	intakePurgeEvery = 2 * time.Second
	// intakeMaxMsgs bounds a new intake stream (with discard new): should the housekeeper fall
	// behind, or a message that cannot be stored hold the ack floor, new schedules are refused
	// at publish (a JetStream publish gets the error) rather than the stream growing without end
	// or an accepted schedule being dropped.
	intakeMaxMsgs = 10_000_000
)

// purgeIntakeLoop purges the intake stream every intakePurgeEvery while this replica is the
// housekeeper, until ctx ends. A stream it must not purge is logged once.
func (b *Bridge) purgeIntakeLoop(ctx context.Context) {
	t := time.NewTicker(intakePurgeEvery)
	defer t.Stop()
	noted := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !b.house.Load() {
			continue
		}
		pctx, cancel := withDefaultTimeout(ctx)
		p, err := b.purgeIntake(pctx)
		cancel()
		switch {
		case err != nil:
			if ctx.Err() == nil {
				b.m.intake.purgeErrors.Inc()
				b.log.Debug("intake purge", "stream", b.cfg.Stream, "err", err)
			}
		case p.skip != "" && !noted:
			noted = true
			b.log.Info(p.skip, "stream", b.cfg.Stream, "retention", p.retention.String(),
				"how_to_move", "subjects.md, \"The intake stream\"")
		}
	}
}

// intakePurge is what one purge round found and did.
type intakePurge struct {
	retention jetstream.RetentionPolicy
	floor     uint64 // the consumer's ack floor (a stream sequence)
	purged    uint64 // messages removed: those from the stream's first sequence to the floor
	skip      string // why the stream is not purged ("" if it is)
}

// purgeIntake removes the intake stream's messages below and at the intake consumer's ack floor,
// if the stream has limits retention and holds only schedule messages.
func (b *Bridge) purgeIntake(ctx context.Context) (intakePurge, error) {
	stream, err := b.js.Stream(ctx, b.cfg.Stream)
	if err != nil {
		return intakePurge{}, fmt.Errorf("look up stream %s: %w", b.cfg.Stream, err)
	}
	info := stream.CachedInfo()
	p := intakePurge{retention: info.Config.Retention}
	switch {
	case p.retention != jetstream.LimitsPolicy:
		p.skip = "intake stream removes each schedule message as it is acked (" + p.retention.String() +
			" retention): one more write per schedule, an fsync under sync_interval: always; a stream the bridge creates has limits retention and is purged below the consumer's ack floor"
		return p, nil
	case !b.cfg.subj.onlySchedule(info.Config.Subjects):
		p.skip = fmt.Sprintf("intake stream also captures subjects outside %s>; it is not purged, and grows until its limits", b.cfg.subj.schedule)
		return p, nil
	}
	cons, err := stream.Consumer(ctx, b.cfg.Consumer)
	if err != nil {
		return p, fmt.Errorf("look up consumer %s: %w", b.cfg.Consumer, err)
	}
	p.floor = cons.CachedInfo().AckFloor.Stream
	first := info.State.FirstSeq
	if p.floor < first || info.State.Msgs == 0 {
		return p, nil // nothing acked that is still in the stream
	}
	// Purge up to, not including, floor+1. The floor only rises meanwhile, so this removes
	// nothing the consumer has not settled.
	if err := stream.Purge(ctx, jetstream.WithPurgeSequence(p.floor+1)); err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return p, nil
		}
		return p, fmt.Errorf("purge stream %s below %d: %w", b.cfg.Stream, p.floor+1, err)
	}
	p.purged = p.floor + 1 - first
	b.m.intake.purged.Add(float64(p.purged))
	return p, nil
}

// onlySchedule reports whether every subject of a stream lies under <prefix>.schedule.: a purge
// of such a stream removes schedule messages alone.
func (s subjects) onlySchedule(streamSubjects []string) bool {
	for _, subj := range streamSubjects {
		if !strings.HasPrefix(subj, s.schedule) || len(subj) == len(s.schedule) {
			return false
		}
	}
	return len(streamSubjects) > 0
}
