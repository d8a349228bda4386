package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The intake stream the bridge creates has limits retention: acking a schedule message does not
// remove it (on a work-queue stream each ack is a removal, a write of its own: an fsync under
// sync_interval: always), and the consumer writes its ack state at most about ten times a second.
// The housekeeper removes what is acked instead, every intakePurgeEvery: it purges the messages
// below the intake consumer's ack floor. The bridge acks a schedule message only once its record
// is durable (or once it has refused the message for good), and the intake consumer never gives
// a message up (no max deliver), so everything below the floor is settled, and nothing not yet
// stored is removed. The floor is one consumer's: the stream is purged only while that consumer is
// its only one and reads all of it (purgeIntake).
const (
	intakePurgeEvery = 2 * time.Second
	// intakeMaxMsgs bounds a new intake stream (with discard new): should the housekeeper fall
	// behind, or a message that cannot be stored hold the ack floor, new schedules are refused
	// at publish (a JetStream publish gets the error) rather than the stream growing without end
	// or an accepted schedule being dropped.
	intakeMaxMsgs = 10_000_000
	// intakePurgeWarnEvery is after how many consecutive failed rounds (a minute of them) a purge
	// failure is logged at Warn again.
	intakePurgeWarnEvery = 30
)

// purgeIntakeLoop purges the intake stream every intakePurgeEvery while this replica is the
// housekeeper, until ctx ends. A stream it does not purge is logged when the reason first
// appears; failures are logged at Warn (purgeFailures).
func (b *Bridge) purgeIntakeLoop(ctx context.Context) {
	t := time.NewTicker(intakePurgeEvery)
	defer t.Stop()
	var fails purgeFailures
	noted := "" // the skip reason last logged
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
		if err != nil {
			if ctx.Err() == nil {
				b.m.intake.purgeErrors.Inc()
				fails.failed(b.log, b.cfg.Stream, err)
			}
			continue
		}
		fails.ok(b.log, b.cfg.Stream)
		if p.unsafe {
			b.m.intake.purgeSkipped.Inc()
		}
		switch {
		case p.skip == noted:
		case p.unsafe:
			b.log.Warn(p.skip, "stream", b.cfg.Stream, "consumer", b.cfg.Consumer, "what_to_do", p.todo)
		case p.skip != "":
			b.log.Info(p.skip, "stream", b.cfg.Stream, "retention", p.retention.String(),
				"how_to_move", "subjects.md, \"The intake stream\"")
		}
		noted = p.skip
	}
}

// purgeFailures logs failed purge rounds: at Warn on the first of a run of them and again after
// every intakePurgeWarnEvery consecutive ones (a purge that always fails, such as one the
// bridge's user may not send, lets the stream fill until it refuses publishes), and at Info when
// a round works again.
type purgeFailures struct {
	n     int       // consecutive failed rounds
	since time.Time // when the first of them failed
}

func (f *purgeFailures) failed(log *slog.Logger, stream string, err error) {
	if f.n == 0 {
		f.since = time.Now()
	}
	f.n++
	if f.n == 1 || f.n%intakePurgeWarnEvery == 0 {
		log.Warn("intake purge failed; acked schedule messages stay in the stream, which refuses new ones once full",
			"stream", stream, "failed_rounds", f.n, "err", err,
			"what_to_do", "the bridge's user needs $JS.API.STREAM.PURGE."+stream+" (permissions.md)")
	}
}

func (f *purgeFailures) ok(log *slog.Logger, stream string) {
	if f.n == 0 {
		return
	}
	log.Info("intake purge works again", "stream", stream, "failed_rounds", f.n, "for", time.Since(f.since).Round(time.Second).String())
	f.n = 0
}

// intakePurge is what one purge round found and did.
type intakePurge struct {
	retention jetstream.RetentionPolicy
	floor     uint64 // the consumer's ack floor (a stream sequence)
	purged    uint64 // messages removed: those from the stream's first sequence to the floor
	skip      string // why the stream is not purged ("" if it is)
	// unsafe: the stream is not purged because a purge could remove messages not settled by
	// the bridge (logged at Warn, counted in ax_intake_purge_skipped_total); todo says what
	// lets it purge again.
	unsafe bool
	todo   string
}

// purgeIntake removes the intake stream's messages below and at the intake consumer's ack floor,
// if the stream has limits retention, holds only schedule messages, and the intake consumer is
// its only consumer, reads every message of it and never gives one up (no max deliver): only
// then is everything below that floor settled for every reader. (A stream that sources or
// mirrors the intake stream reads it through a consumer that stream info does not count; a purge
// can remove messages it has not copied yet.)
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
	case info.State.Consumers != 1:
		p.unsafe = true
		p.skip = fmt.Sprintf("intake stream has %d consumers; it is purged only while the intake consumer is its only one (a purge would remove messages another consumer has not read), and grows until its limits refuse new schedules", info.State.Consumers)
		p.todo = fmt.Sprintf("delete the other consumers (`nats consumer ls %s`), or read schedules another way", b.cfg.Stream)
		return p, nil
	}
	cons, err := stream.Consumer(ctx, b.cfg.Consumer)
	if err != nil {
		return p, fmt.Errorf("look up consumer %s: %w", b.cfg.Consumer, err)
	}
	ci := cons.CachedInfo()
	if why := purgeUnsafe(ci.Config, info.Config.Subjects); why != "" {
		p.unsafe = true
		p.skip = "intake consumer " + why + "; the intake stream is not purged, and grows until its limits refuse new schedules"
		p.todo = fmt.Sprintf("`nats consumer edit %s %s --max-deliver=-1` for a max deliver; otherwise delete the consumer and the bridge creates it", b.cfg.Stream, b.cfg.Consumer)
		return p, nil
	}
	p.floor = ci.AckFloor.Stream
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

// purgeUnsafe says why the intake consumer's ack floor does not bound what is settled in a
// stream with the given subjects, or "" if it does: the consumer must start at the stream's
// first message, read every subject of it, and never give up a message (a message that used up
// a max deliver unsettled lies below the floor).
func purgeUnsafe(cc jetstream.ConsumerConfig, streamSubjects []string) string {
	filters := cc.FilterSubjects
	if cc.FilterSubject != "" {
		filters = append(filters, cc.FilterSubject)
	}
	switch {
	case cc.DeliverPolicy != jetstream.DeliverAllPolicy:
		return fmt.Sprintf("does not deliver all messages (deliver policy %s)", cc.DeliverPolicy)
	case len(filters) > 0 && !filtersCover(filters, streamSubjects):
		return fmt.Sprintf("filters %q do not cover the stream's subjects %q", filters, streamSubjects)
	case cc.MaxDeliver > 0:
		return fmt.Sprintf("has max deliver %d: a message that used up its deliveries unsettled (a bridge stopped during each) would lie below the ack floor", cc.MaxDeliver)
	}
	return ""
}

// filtersCover reports whether every subject a stream captures matches one of the filters.
func filtersCover(filters, streamSubjects []string) bool {
	for _, s := range streamSubjects {
		covered := false
		for _, f := range filters {
			if subjectWithin(s, f) {
				covered = true
				break
			}
		}
		if !covered {
			return false
		}
	}
	return true
}

// subjectWithin reports whether every subject matching pattern sub also matches pattern f.
func subjectWithin(sub, f string) bool {
	st, ft := strings.Split(sub, "."), strings.Split(f, ".")
	for i, tok := range ft {
		switch {
		case tok == ">":
			return i < len(st)
		case i >= len(st), st[i] == ">":
			return false
		case tok == "*":
		case tok != st[i] || st[i] == "*":
			return false
		}
	}
	return len(st) == len(ft)
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
