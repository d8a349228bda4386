package bridge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge/internal/membership"
	"github.com/axbridge/axbridge/kvstore"
)

// Membership is what the bridge needs from the membership bucket; *kvstore.Members implements it.
type Membership = membership.Store

// ownership is which partitions this replica owns, and until when (monotonic) unless a heartbeat
// renews it. A snapshot is never changed once published.
type ownership struct {
	parts []bool
	n     int // how many are owned
	until time.Time
}

// owned is the sorted list of owned partitions.
func (o *ownership) owned() []int {
	var ps []int
	for p, ok := range o.parts {
		if ok {
			ps = append(ps, p)
		}
	}
	return ps
}

// ownsPartition reports whether this replica owns partition p now: claims and fires check it.
func (b *Bridge) ownsPartition(p int) bool {
	o := b.own.Load()
	return o != nil && p < len(o.parts) && o.parts[p] && time.Now().Before(o.until)
}

// alive reports whether this replica's heartbeats are confirmed recently enough that nobody else
// can have taken its partitions over: a claim that landed is fired only then.
func (b *Bridge) alive() bool {
	o := b.own.Load()
	return o != nil && time.Now().Before(o.until)
}

// ownsTask reports whether this replica owns the partition of task id now.
func (b *Bridge) ownsTask(id string) bool { return b.ownsPartition(kvstore.Partition(id, b.nparts)) }

// fenceMargin is how much earlier than the others this replica stops owning its partitions after
// its last confirmed heartbeat.
func (b *Bridge) fenceMargin() time.Duration { return b.cfg.PartitionLease / 5 }

// startMembers joins the replicas (package membership) and starts the intake purge loop, which
// works while this replica is the housekeeper; both run until membersCtx ends and Stop.
func (b *Bridge) startMembers(ctx, membersCtx context.Context, cfg membersConfig) error {
	m, err := membership.New(membership.Config{
		ReplicaID:  cfg.Replica,
		Partitions: b.nparts,
		Lease:      cfg.Lease,
		Store:      b.members,
		Conn:       b.nc,
		Logger:     b.log,
		Metrics: membership.Metrics{Owned: b.m.members.owned, Housekeeper: b.m.members.housekeeper,
			HeartbeatErrors: b.m.members.heartbeatErrors, FencedLeaves: b.m.members.fencedLeaves},
		Acks:        b.takeAcks,
		Flush:       b.nc.FlushWithContext,
		Own:         b.setOwnership,
		Sweep:       b.sweepFired,
		Housekeeper: b.house.Store,
	})
	if err != nil {
		return err
	}
	b.member = m
	if err := m.Start(ctx); err != nil {
		b.unsubscribeAcks()
		return err
	}
	b.membersRun.Add(1)
	go func() {
		defer b.membersRun.Done()
		b.purgeIntakeLoop(membersCtx)
	}()
	return nil
}

// stopMember ends what startMembers began and leaves the replicas; left says the leave was
// confirmed. Then ackSubscriptions are the ack subscriptions left to drain.
func (b *Bridge) stopMember(ctx context.Context) (left bool, err error) {
	b.stopMembers()
	err = b.member.Stop(ctx)
	left = err == nil
	if errors.Is(err, membership.ErrNotLeft) {
		b.log.Debug("leave the replicas; the heartbeat key expires instead", "err", err)
	}
	if !waitCtx(ctx, &b.membersRun) {
		err = errors.Join(err, errors.New("intake purge still running"))
	}
	if err != nil && !errors.Is(err, membership.ErrNotLeft) {
		return left, fmt.Errorf("stop membership: %w", err)
	}
	return left, nil
}

// setOwnership publishes a snapshot of the membership goroutine.
func (b *Bridge) setOwnership(o membership.Ownership, changed bool) {
	b.liveMembers.Store(int64(o.Members))
	b.rank.Store(int64(o.Rank))
	b.own.Store(&ownership{parts: o.Parts, n: o.N, until: o.Until})
	if changed {
		select {
		case b.ownChanged <- struct{}{}:
		default:
		}
	}
}

// takeAcks subscribes to the acks of the partitions of parts and ends the others' subscriptions;
// every subscriber of a partition gets each of its acks, and CAS makes a second application a
// no-op. It runs on the membership goroutine.
func (b *Bridge) takeAcks(parts []bool) {
	if b.ackSub == nil {
		b.ackSub = map[int]*nats.Subscription{}
	}
	for p, take := range parts {
		sub := b.ackSub[p]
		switch {
		case take && sub == nil:
			sub, err := b.nc.Subscribe(b.cfg.subj.ackFilter(p), b.onAck)
			if err != nil {
				b.log.Error("subscribe to acks of a partition", "partition", p, "err", err)
				continue
			}
			_ = sub.SetPendingLimits(ackPendingMsgs, ackPendingBytes)
			b.m.ack.countDrops(sub)
			b.ackSub[p] = sub
		case !take && sub != nil:
			_ = sub.Unsubscribe()
			delete(b.ackSub, p)
		}
	}
}

// ackSubscriptions are the ack subscriptions, for Stop once the membership goroutine has ended.
func (b *Bridge) ackSubscriptions() []*nats.Subscription {
	subs := make([]*nats.Subscription, 0, len(b.ackSub))
	for _, sub := range b.ackSub {
		subs = append(subs, sub)
	}
	return subs
}

// unsubscribeAcks ends every ack subscription.
func (b *Bridge) unsubscribeAcks() {
	for p, sub := range b.ackSub {
		_ = sub.Unsubscribe()
		delete(b.ackSub, p)
	}
}

// sweepFired forgets the fired attempts (b.fired) of partitions whose acks no longer come here:
// a claim that completes after its partition moved still caches its attempt once fired, and no
// ack or watch event will remove it. It runs on the membership goroutine, once a lease.
func (b *Bridge) sweepFired(gone []bool) {
	b.fired.dropIf(func(id string) bool { return gone[kvstore.Partition(id, b.nparts)] })
}
