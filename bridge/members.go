package bridge

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/kvstore"
)

// Replicas divide the bucket's partitions among the live ones. Each replica heartbeats its key in
// the membership bucket every PartitionLease/4 and watches the others' keys; a replica counts as
// alive here until PartitionLease after its last heartbeat arrived (or its key was deleted, as a
// replica does when it stops). Every replica computes the same assignment from the same live set
// (assign: rendezvous hashing with bounded loads, so that each owns an equal share), and a join
// or a death moves few partitions besides those that must move.
//
// Self-fencing: a replica owns its partitions only until PartitionLease − a margin after it sent
// its last heartbeat that the server confirmed. Others count it alive until PartitionLease after
// that heartbeat arrived, which is later, so a replica that is cut off or paused stops claiming and
// firing before anybody takes over its partitions. Claims and fires check ownership right before
// they go out (and a fire again after its claim returned); CAS on every transition keeps an
// overlap harmless. A replica fenced for half a lease (and one whose own connection has been down
// for a quarter of a lease, which fences it) deletes its key, so that the others take its
// partitions at once instead of counting it for as long as its key lives, and heartbeats again,
// which makes it a member again, once the delete was confirmed (see heartbeats).
//
// Joining: a replica loads the member view and subscribes to the acks of the partitions it will
// own before its first heartbeat, which is what makes the others hand them over.

// Membership is what the bridge needs from the membership bucket; *kvstore.Members implements it.
type Membership interface {
	Heartbeat(ctx context.Context, replica string, ttl time.Duration) error
	Leave(ctx context.Context, replica string) error
	WatchMembers(ctx context.Context) (<-chan kvstore.MemberEvent, error)
	Campaign(ctx context.Context, key, holder string, ttl time.Duration) (uint64, error)
	Renew(ctx context.Context, key, holder string, rev uint64, ttl time.Duration) (uint64, error)
	Resign(ctx context.Context, key string, rev uint64) error
}

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
// can have taken its partitions over: a claim that landed is fired only then. (A claim that landed
// while the partition moved to another live replica is fired all the same: it won its CAS, and
// the new owner waits for its lease.)
func (b *Bridge) alive() bool {
	o := b.own.Load()
	return o != nil && time.Now().Before(o.until)
}

// ownsTask reports whether this replica owns the partition of task id now.
func (b *Bridge) ownsTask(id string) bool { return b.ownsPartition(kvstore.Partition(id, b.nparts)) }

// fenceMargin is how much earlier than the others this replica stops owning its partitions after
// its last confirmed heartbeat: a fifth of the lease (the others count from the heartbeat's
// arrival, which is later than its sending, from which this replica counts).
func (b *Bridge) fenceMargin() time.Duration { return b.cfg.PartitionLease / 5 }

// assign gives each of n partitions an owner among members (sorted, distinct), every member
// either ⌊n/len⌋ or ⌈n/len⌉ of them: rendezvous hashing with bounded loads. All (member,
// partition) pairs are taken in order of their score, highest first, and a pair assigns its
// partition unless the partition has an owner or the member its share. Replicas that see the same
// members compute the same assignment, and a change of members moves few partitions besides
// those that must move (a dead member's, or a joining member's share).
func assign(members []string, n int) []string {
	owner := make([]string, n)
	if len(members) == 0 {
		return owner
	}
	type pair struct {
		score uint64
		m     int
		p     int
	}
	pairs := make([]pair, 0, len(members)*n)
	for i, m := range members {
		for p := range n {
			pairs = append(pairs, pair{score(m, p), i, p})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		switch {
		case a.score != b.score:
			if a.score > b.score {
				return -1
			}
			return 1
		case a.m != b.m:
			return a.m - b.m
		}
		return a.p - b.p
	})
	base, extra := n/len(members), n%len(members)
	load := make([]int, len(members))
	big := 0 // members holding base+1
	for _, pr := range pairs {
		if owner[pr.p] != "" {
			continue
		}
		switch l := load[pr.m]; {
		case l < base:
		case l == base && big < extra:
			big++
		default:
			continue
		}
		load[pr.m]++
		owner[pr.p] = members[pr.m]
	}
	return owner
}

// score is a stable hash of (member, partition): FNV-1a 64 finished with splitmix64's mixer, so
// that close inputs spread.
func score(member string, p int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(member))
	var buf [9]byte
	buf[0] = '/'
	binary.BigEndian.PutUint64(buf[1:], uint64(p))
	h.Write(buf[:])
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// memberState is owned by the membership goroutine (runMembers).
type memberState struct {
	b       *Bridge
	others  map[string]time.Time // live replicas but this one → when they expire here (monotonic)
	loading map[string]time.Time // during a members watch's initial load: the keys seen so far
	fence   time.Time            // this replica owns its partitions until then
	// Only heartbeats sent at or after renewFrom renew the fence: the last time this replica gave
	// up its partitions at once (its connection was down) or left; an earlier heartbeat may arrive
	// before its leave.
	renewFrom time.Time
	parts     []bool
	subs      map[int]*nats.Subscription // ack subscriptions by partition: owned, or in their grace
	grace     map[int]time.Time          // lost partitions whose ack subscription ends then
	sweepAt   time.Time                  // when sweepFired runs next
	fenced    bool                       // no heartbeat confirmed within the lease (logged once)
}

// startMembers loads the live members, subscribes to the acks of the partitions this replica
// will own, and only then writes its first heartbeat, which is what makes the others hand it
// partitions: a joiner is announced once it can take their acks. Then it computes the first
// ownership; the goroutines that keep all of it up to date run until ctx ends.
func (b *Bridge) startMembers(ctx, membersCtx context.Context) (err error) {
	events, err := b.members.WatchMembers(membersCtx)
	if err != nil {
		return err
	}
	s := &memberState{b: b, others: map[string]time.Time{}, loading: map[string]time.Time{},
		subs: map[int]*nats.Subscription{}, grace: map[int]time.Time{}}
	defer func() {
		if err != nil {
			for _, sub := range s.subs {
				_ = sub.Unsubscribe()
			}
		}
	}()
	wctx, wcancel := withDefaultTimeout(ctx)
	defer wcancel()
	for s.loading != nil {
		select {
		case ev, ok := <-events:
			if !ok {
				return errMembersWatchEnded
			}
			s.event(ev)
		case <-wctx.Done():
			return wctx.Err()
		}
	}
	if err := s.prepare(wctx); err != nil {
		return err
	}
	sent := time.Now()
	hctx, cancel := withDefaultTimeout(ctx)
	err = b.members.Heartbeat(hctx, b.cfg.ReplicaID, b.cfg.PartitionLease)
	cancel()
	if err != nil {
		return err
	}
	s.fence = sent.Add(b.cfg.PartitionLease - b.fenceMargin())
	s.update()
	b.memberState = s
	confirmed := make(chan time.Time, 16) // heartbeats → runMembers: send times of confirmed heartbeats
	fences := make(chan fenceReq)         // heartbeats → runMembers: give up the partitions now
	b.membersRun.Add(3)
	go func() {
		defer b.membersRun.Done()
		b.heartbeats(membersCtx, confirmed, fences)
	}()
	go func() {
		defer b.membersRun.Done()
		s.run(membersCtx, events, confirmed, fences)
	}()
	go func() {
		defer b.membersRun.Done()
		b.housekeeper(membersCtx)
	}()
	return nil
}

// prepare subscribes to the acks of the partitions this replica owns once the members it sees
// count it too, and waits until the server has the subscriptions. The others hand it those
// partitions when its first heartbeat arrives, and keep their own subscriptions for a lease
// only: an ack sent after that reaches this replica.
func (s *memberState) prepare(ctx context.Context) error {
	b := s.b
	live := []string{b.cfg.ReplicaID}
	for id := range s.others {
		live = append(live, id)
	}
	slices.Sort(live)
	parts := make([]bool, b.nparts)
	for p, m := range assign(live, b.nparts) {
		parts[p] = m == b.cfg.ReplicaID
	}
	s.moveAckSubs(parts, time.Now())
	if err := b.nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("subscribe to acks: %w", err)
	}
	return nil
}

type membersError string

func (e membersError) Error() string { return string(e) }

const errMembersWatchEnded = membersError("bridge: the members watch ended")

// fenceReq asks the membership goroutine to end this replica's ownership at once (at): it does,
// and from then on renews it only by heartbeats sent at or after at. done is closed once the
// snapshot that says so is published.
type fenceReq struct {
	at   time.Time
	done chan struct{}
}

// heartbeats writes this replica's key every PartitionLease/4 and reports the send time of each
// one the server confirmed. They do not wait for one another, so that one slow answer does not
// hold the next heartbeat back, and each may take until the ownership it would renew ends
// (lease − margin after its sending): a confirmation that comes later renews nothing.
//
// A replica that does not own its partitions leaves: it deletes its key, so that the others stop
// counting it and take its partitions at once, rather than when its key expires (or never, while
// heartbeats that are not confirmed in time still arrive). It leaves once its own connection has
// been down for a quarter of a lease (which fences it then), or once it has been fenced (no
// heartbeat confirmed in time) for half a lease, heartbeating meanwhile. That half lease damps a
// slow JetStream: a leave and the join after it move the replica's share to the others and back,
// and each move reloads those partitions, more load on a server already slow; a heartbeat
// confirmed within the half lease ends the fence with nothing moved. Once a leave is confirmed it
// heartbeats again, which makes it a member again (a join); a join whose heartbeat is not
// confirmed leaves again at once, and waits twice as many ticks before the next, up to two
// leases, so that a server that stays slow sees one leave and join every two leases or so at
// most. While a leave or a join is in flight, a fenced replica writes nothing else.
func (b *Bridge) heartbeats(ctx context.Context, confirmed chan<- time.Time, fences chan<- fenceReq) {
	lease := b.cfg.PartitionLease
	t := time.NewTicker(lease / 4)
	defer t.Stop()
	// A disconnection that lasts downGrace is acted on then rather than at the next tick after;
	// a reconnection ends it at once, so that two blips in a row do not count as one outage.
	status := b.nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED, nats.CONNECTED)
	defer b.nc.RemoveStatusListener(status)
	downGrace := lease / 4
	var downSince time.Time // when this replica's connection was first seen down; zero while up
	downTimer := time.NewTimer(time.Hour)
	downTimer.Stop()
	defer downTimer.Stop()
	var inflight sync.WaitGroup
	defer inflight.Wait()
	var failing atomic.Bool
	var (
		left, leaving atomic.Bool // a leave confirmed since the last heartbeat; a leave in flight
		joining       atomic.Bool // the heartbeat of a join while fenced is in flight
		rejoinWait    int         // ticks to wait before the next join while fenced
		rejoinPause   = 1         // the pause after the next join that fails
	)
	fence := func(at time.Time) bool {
		r := fenceReq{at: at, done: make(chan struct{})}
		select {
		case fences <- r:
		case <-ctx.Done():
			return false
		}
		select {
		case <-r.done:
			return true
		case <-ctx.Done():
			return false
		}
	}
	leave := func() {
		if leaving.Load() || left.Load() || !fence(time.Now()) {
			return
		}
		leaving.Store(true)
		inflight.Add(1)
		go func() {
			defer inflight.Done()
			defer leaving.Store(false)
			lctx, cancel := context.WithTimeout(ctx, lease-b.fenceMargin())
			err := b.members.Leave(lctx, b.cfg.ReplicaID)
			cancel()
			if err == nil {
				left.Store(true)
				b.m.members.fencedLeaves.Inc()
				b.log.Info("left the replicas while fenced: the others take this replica's partitions now", "replica", b.cfg.ReplicaID)
			} else if ctx.Err() == nil {
				b.log.Debug("leave while fenced", "replica", b.cfg.ReplicaID, "err", err)
			}
		}()
	}
	// fencedLeave is how long a replica stays fenced, heartbeating, before it leaves: see above.
	fencedLeave := lease / 2
	fencedFor := func() time.Duration {
		o := b.own.Load()
		if o == nil {
			return 0
		}
		return time.Since(o.until)
	}
	tick := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			tick = true
		case st := <-status:
			if st == nats.CONNECTED {
				// Even if it is down again already: a new outage counts from now.
				downSince = time.Time{}
				downTimer.Stop()
			}
		case <-downTimer.C:
		}
		if !b.nc.IsConnected() {
			// Heartbeats may travel on a connection of their own: they must not keep this replica
			// the owner of partitions in which its own connection can claim, fire and take acks
			// nothing. Once the connection has been down for downGrace (a blip costs no move),
			// it gives them up and leaves.
			now := time.Now()
			if downSince.IsZero() {
				downSince = now
				downTimer.Reset(downGrace)
			}
			if tick {
				b.m.members.heartbeatErrors.Inc()
			}
			tick = false
			if !failing.Swap(true) {
				b.log.Warn("no heartbeat while this replica's NATS connection is down; it gives up its partitions and leaves if it stays down",
					"replica", b.cfg.ReplicaID, "after", downGrace)
			}
			if now.Sub(downSince) >= downGrace {
				leave()
			}
			continue
		}
		if !downSince.IsZero() {
			downSince = time.Time{}
			downTimer.Stop()
		}
		if !tick {
			continue // a status change that is over: heartbeats go at the ticks
		}
		tick = false
		join := false
		if !b.alive() {
			switch {
			case leaving.Load(), joining.Load():
				continue
			case !left.Load() && rejoinPause == 1 && fencedFor() < fencedLeave:
				// Fenced for less than fencedLeave, and not since a join: heartbeat, which may end
				// the fence. (A join whose heartbeat was not confirmed leaves at once.)
			case !left.Load():
				leave()
				continue
			case rejoinWait > 0:
				rejoinWait--
				continue
			default:
				join = true
				rejoinWait, rejoinPause = rejoinPause, min(2*rejoinPause, 8)
			}
		} else {
			rejoinWait, rejoinPause = 0, 1
		}
		if join {
			b.log.Info("joining the replicas again", "replica", b.cfg.ReplicaID)
		}
		left.Store(false)
		joining.Store(join)
		sent := time.Now()
		inflight.Add(1)
		go func() {
			defer inflight.Done()
			if join {
				defer joining.Store(false)
			}
			hctx, cancel := context.WithTimeout(ctx, lease-b.fenceMargin())
			err := b.members.Heartbeat(hctx, b.cfg.ReplicaID, lease)
			cancel()
			switch {
			case err == nil:
				if failing.Swap(false) {
					b.log.Info("heartbeats confirmed again", "replica", b.cfg.ReplicaID)
				}
				select {
				case confirmed <- sent:
				case <-ctx.Done():
				}
			case ctx.Err() != nil:
			default:
				b.m.members.heartbeatErrors.Inc()
				if !failing.Swap(true) {
					b.log.Warn("heartbeat failed; this replica gives up its partitions if none is confirmed within the lease",
						"replica", b.cfg.ReplicaID, "err", err)
				}
			}
		}()
	}
}

// run keeps the member view, the ownership and the ack subscriptions up to date until ctx ends.
func (s *memberState) run(ctx context.Context, events <-chan kvstore.MemberEvent, confirmed <-chan time.Time, fences <-chan fenceReq) {
	b := s.b
	rewatched := make(chan (<-chan kvstore.MemberEvent), 1) // re-watch goroutine → run
	rewatching := make(chan struct{})
	close(rewatching)
	defer func() { <-rewatching }()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var done chan struct{} // of a fence request, closed once update has published it
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				events = nil
				b.log.Warn("members watch ended; starting it again")
				rewatching = make(chan struct{})
				go func(done chan struct{}) {
					defer close(done)
					s.rewatch(ctx, rewatched)
				}(rewatching)
				break
			}
			s.event(ev)
		case ch := <-rewatched:
			events, s.loading = ch, map[string]time.Time{}
		case sent := <-confirmed:
			if f := sent.Add(b.cfg.PartitionLease - b.fenceMargin()); f.After(s.fence) && !sent.Before(s.renewFrom) {
				s.fence = f
			}
		case r := <-fences:
			s.fence, s.renewFrom = minTime(s.fence, r.at), r.at
			done = r.done
		case <-timer.C:
		}
		next := s.update()
		if done != nil {
			close(done)
			done = nil
		}
		timer.Reset(max(time.Until(next), time.Millisecond))
	}
}

// rewatch starts the members watch again, with a growing pause between attempts.
func (s *memberState) rewatch(ctx context.Context, out chan<- (<-chan kvstore.MemberEvent)) {
	pause := rewatchFirstPause
	for {
		ch, err := s.b.members.WatchMembers(ctx)
		if err == nil {
			select {
			case out <- ch:
			case <-ctx.Done():
			}
			return
		}
		s.b.log.Debug("start members watch; trying again", "err", err)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		pause = min(2*pause, rewatchMaxPause)
	}
}

// event applies one change of the membership bucket. A key in a watch's initial load counts from
// the server's time of its heartbeat (so a replica that died a while ago does not count as alive
// for a whole lease more); a later one from its arrival here.
func (s *memberState) event(ev kvstore.MemberEvent) {
	lease := s.b.cfg.PartitionLease
	switch {
	case ev.InitDone:
		if s.loading != nil {
			s.others, s.loading = s.loading, nil
		}
	case ev.ID == s.b.cfg.ReplicaID || ev.ID == "":
		// this replica's liveness is its own confirmed heartbeats
	case ev.Deleted:
		delete(s.others, ev.ID)
		delete(s.loading, ev.ID)
	case s.loading != nil:
		age := max(s.b.cfg.Now().Sub(ev.At), 0)
		if age < lease {
			s.loading[ev.ID] = time.Now().Add(lease - age)
		}
	default:
		s.others[ev.ID] = time.Now().Add(lease)
	}
}

// update expires what ran out, recomputes the ownership, moves the ack subscriptions and
// publishes a new snapshot; it returns when it must run again at the latest.
func (s *memberState) update() time.Time {
	b := s.b
	now := time.Now()
	next := now.Add(b.cfg.PartitionLease)
	live := make([]string, 0, len(s.others)+1)
	for id, exp := range s.others {
		if !now.Before(exp) {
			delete(s.others, id)
			b.log.Info("replica no longer alive: its partitions move", "member", id)
			continue
		}
		live = append(live, id)
		if exp.Before(next) {
			next = exp
		}
	}
	self := now.Before(s.fence)
	if self {
		live = append(live, b.cfg.ReplicaID)
		if s.fence.Before(next) {
			next = s.fence
		}
	}
	slices.Sort(live)
	b.liveMembers.Store(int64(len(live)))
	next = s.graceEnds(now, next)
	if !self {
		// Fenced: the snapshot's time has passed, so it claims and fires nothing; but it keeps
		// its partitions' index and watch, so that once heartbeats are confirmed again it goes on
		// at once if nothing moved meanwhile (and its watch has brought whatever others did).
		if !s.fenced {
			s.fenced = true
			b.log.Warn("no heartbeat confirmed within the lease, or the connection is down: this replica claims and fires nothing until a heartbeat is confirmed",
				"replica", b.cfg.ReplicaID)
		}
		b.own.Store(&ownership{parts: s.parts, n: owned(s.parts), until: s.fence})
		b.m.members.owned.Set(0)
		return s.sweepFired(now, next)
	}
	wake := false
	if s.fenced {
		s.fenced, wake = false, true
		b.log.Info("heartbeats confirmed again: this replica claims and fires in its partitions again", "replica", b.cfg.ReplicaID)
	}
	parts := make([]bool, b.nparts)
	for p, m := range assign(live, b.nparts) {
		parts[p] = m == b.cfg.ReplicaID
	}
	n := owned(parts)
	changed := !slices.Equal(parts, s.parts)
	if changed {
		s.moveAckSubs(parts, now)
		b.log.Info("partitions owned", "replica", b.cfg.ReplicaID, "owned", n, "of", b.nparts, "members", len(live))
	}
	s.parts = parts
	b.own.Store(&ownership{parts: parts, n: n, until: s.fence})
	b.m.members.owned.Set(float64(n))
	if changed || wake {
		select {
		case b.ownChanged <- struct{}{}:
		default:
		}
	}
	return s.sweepFired(now, next)
}

// sweepFired forgets, once a lease, the fired attempts (b.fired) of partitions this replica
// neither owns nor takes acks of any more, and returns next, or the next sweep if sooner. The
// loop forgets those of a partition it loses, but a claim that completes after that still caches
// its attempt once fired, and neither an ack nor a watch event of that partition reaches this
// replica any more to remove it. Forgetting costs nothing but a read should an ack come after
// all. A sweep reads the whole cache (the attempts in flight) under its lock.
func (s *memberState) sweepFired(now, next time.Time) time.Time {
	b := s.b
	if now.Before(s.sweepAt) {
		return minTime(next, s.sweepAt)
	}
	s.sweepAt = now.Add(b.cfg.PartitionLease)
	gone := make([]bool, b.nparts)
	some := false
	for p := range gone {
		if (p >= len(s.parts) || !s.parts[p]) && s.subs[p] == nil {
			gone[p], some = true, true
		}
	}
	if some {
		b.fired.dropIf(func(id string) bool { return gone[kvstore.Partition(id, b.nparts)] })
	}
	return minTime(next, s.sweepAt)
}

// graceEnds ends the ack subscriptions whose grace is over and returns next, or the end of the
// next grace if sooner.
func (s *memberState) graceEnds(now, next time.Time) time.Time {
	for p, end := range s.grace {
		if !now.Before(end) {
			if sub := s.subs[p]; sub != nil {
				_ = sub.Unsubscribe()
			}
			delete(s.subs, p)
			delete(s.grace, p)
		} else if end.Before(next) {
			next = end
		}
	}
	return next
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func owned(parts []bool) int {
	n := 0
	for _, ok := range parts {
		if ok {
			n++
		}
	}
	return n
}

// moveAckSubs subscribes to the acks of gained partitions before they are published as owned, and
// keeps a lost partition's subscription for a lease, so that an ack that arrives during a move is
// applied by someone (every subscriber of a partition gets each of its acks; CAS makes a second
// application a no-op).
func (s *memberState) moveAckSubs(parts []bool, now time.Time) {
	b := s.b
	for p, own := range parts {
		switch {
		case own && s.subs[p] != nil:
			delete(s.grace, p)
		case own:
			sub, err := b.nc.Subscribe(b.cfg.subj.ackFilter(p), b.onAck)
			if err != nil {
				b.log.Error("subscribe to acks of a partition", "partition", p, "err", err)
				continue
			}
			_ = sub.SetPendingLimits(ackPendingMsgs, ackPendingBytes)
			b.m.ack.countDrops(sub)
			s.subs[p] = sub
		case s.subs[p] != nil:
			if _, ok := s.grace[p]; !ok {
				s.grace[p] = now.Add(b.cfg.PartitionLease)
			}
		}
	}
}

// ackSubscriptions are the ack subscriptions left once the membership goroutine has ended.
func (s *memberState) ackSubscriptions() []*nats.Subscription {
	subs := make([]*nats.Subscription, 0, len(s.subs))
	for _, sub := range s.subs {
		subs = append(subs, sub)
	}
	return subs
}
