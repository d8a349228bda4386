package bridge

import (
	"context"
	"errors"
	"time"

	"github.com/axbridge/axbridge/kvstore"
)

// housekeeperKey is the key of the membership bucket whose holder is the housekeeper.
const housekeeperKey = "housekeeper"

// housekeeper elects one replica for the work that runs once per bucket: every PartitionLease/3 a
// replica that is not the housekeeper tries to create the key (it exists while a holder renews
// it; its TTL of a lease removes it once the holder stops), and the housekeeper renews it by CAS on
// its revision. Like ownership, the post holds only until a lease minus the margin after the last
// confirmed write, so two replicas never both count themselves housekeeper for longer than a
// write's flight. What the housekeeper does: it reports ax_members (the live replicas it sees; the
// others report 0, so that sum() over replicas is the member count), and it purges the intake
// stream below the intake consumer's ack floor (intake_purge.go). The records' retention needs no
// replica (the server removes finished records by their TTL), and the reconciler repairs each
// replica's own partitions.
func (b *Bridge) housekeeper(ctx context.Context) {
	purging := make(chan struct{})
	go func() {
		defer close(purging)
		b.purgeIntakeLoop(ctx)
	}()
	defer func() { <-purging }()
	every := b.cfg.PartitionLease / 3
	ttl := b.cfg.PartitionLease
	var rev uint64
	var until time.Time
	t := time.NewTimer(0)
	defer t.Stop()
	defer func() {
		b.house.Store(false)
		b.m.members.housekeeper.Set(0)
		if rev != 0 && time.Now().Before(until) {
			rctx, cancel := context.WithTimeout(context.Background(), every)
			_ = b.members.Resign(rctx, housekeeperKey, rev)
			cancel()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		wctx, cancel := context.WithTimeout(ctx, every)
		var err error
		if rev != 0 && sent.Before(until) {
			var next uint64
			if next, err = b.members.Renew(wctx, housekeeperKey, b.cfg.ReplicaID, rev, ttl); err == nil {
				rev = next
			}
		} else {
			rev = 0
			if rev, err = b.members.Campaign(wctx, housekeeperKey, b.cfg.ReplicaID, ttl); err != nil {
				rev = 0
			}
		}
		cancel()
		switch {
		case err == nil:
			until = sent.Add(b.cfg.PartitionLease - b.fenceMargin())
		case errors.Is(err, kvstore.ErrConflict):
			rev = 0 // another replica holds it
		case ctx.Err() != nil:
			return
		default:
			b.log.Debug("housekeeper lease", "err", err)
		}
		is := rev != 0 && time.Now().Before(until)
		if was := b.house.Swap(is); was != is {
			b.log.Info("housekeeper", "replica", b.cfg.ReplicaID, "is", is)
		}
		if is {
			b.m.members.housekeeper.Set(1)
		} else {
			b.m.members.housekeeper.Set(0)
		}
		t.Reset(max(every-time.Since(sent), 0))
	}
}
