package membership

import (
	"slices"
	"time"

	"github.com/axbridge/axbridge/kvstore"
)

// view is the member view and what follows from it: the owned partitions and those whose acks
// this replica takes. Owned by the member's goroutine.
type view struct {
	cfg     Config
	nonce   string            // this process's (beat)
	others  map[string]peer   // live replicas but this one
	loading map[string]peer   // during a watch's initial load: the keys seen so far
	parts   []bool            // owned, as last published unfenced
	acks    []bool            // whose acks are taken: owned, or in their grace
	grace   map[int]time.Time // lost partitions whose acks are taken until then
	sweepAt time.Time         // when Sweep is due next
	fenced  bool              // the last snapshot was fenced (logged once)
	next    time.Time         // when update must run again at the latest
}

// peer is another replica as this one sees it.
type peer struct {
	exp  time.Time // when it expires here (Clock)
	beat           // its newest heartbeat
}

func newView(cfg Config, nonce string) view {
	return view{cfg: cfg, nonce: nonce, others: map[string]peer{}, loading: map[string]peer{},
		acks: make([]bool, cfg.Partitions), grace: map[int]time.Time{}}
}

// event applies one change of the membership bucket that arrived at now. Every heartbeat, one of
// a watch's initial load too, counts from its arrival (doc.go). foreign says another process
// wrote this replica's key.
func (v *view) event(ev kvstore.MemberEvent, now time.Time) (foreign bool) {
	switch {
	case ev.InitDone:
		if v.loading != nil {
			v.others, v.loading = v.loading, nil
		}
	case ev.ID == "":
	case ev.ID == v.cfg.ReplicaID:
		// This replica's liveness is its own confirmed heartbeats.
		return !ev.Deleted && parseBeat(ev.Value).nonce != v.nonce
	case ev.Deleted:
		delete(v.others, ev.ID)
		delete(v.loading, ev.ID)
	default:
		ps := v.others
		if v.loading != nil {
			ps = v.loading
		}
		p, b := ps[ev.ID], parseBeat(ev.Value)
		if b.nonce != p.nonce || b.seq >= p.seq {
			p.beat = b
		}
		p.exp = now.Add(v.cfg.Lease)
		ps[ev.ID] = p
	}
	return false
}

// prepare returns the partitions this replica will own once the members it sees count it too,
// whose acks it takes from now on.
func (v *view) prepare(now time.Time) []bool {
	live := []string{v.cfg.ReplicaID}
	for id, p := range v.others {
		if !p.fenced {
			live = append(live, id)
		}
	}
	slices.Sort(live)
	v.takeAcks(share(live, v.cfg.Partitions, v.cfg.ReplicaID), now)
	return slices.Clone(v.acks)
}

// update expires what ran out and computes the snapshot of now, with this replica a member if
// self; a replica whose newest heartbeat says it is fenced is none. acksMoved says v.acks changed.
func (v *view) update(now time.Time, self bool, until time.Time) (o Ownership, changed, acksMoved bool) {
	v.next = now.Add(v.cfg.Lease)
	live := make([]string, 0, len(v.others)+1)
	for id, p := range v.others {
		if !now.Before(p.exp) {
			delete(v.others, id)
			v.cfg.Logger.Info("replica no longer alive: its partitions move", "member", id)
			continue
		}
		v.next = minTime(v.next, p.exp)
		if !p.fenced { // a fenced one owns nothing: the others take its share
			live = append(live, id)
		}
	}
	if self {
		live = append(live, v.cfg.ReplicaID)
		v.next = minTime(v.next, until)
	}
	slices.Sort(live)
	acksMoved = v.graceEnds(now)
	o = Ownership{Parts: v.parts, N: count(v.parts), Until: until, Members: len(live),
		Rank: max(0, slices.Index(live, v.cfg.ReplicaID))}
	if !self {
		// Fenced: it claims and fires nothing, but keeps its partitions, so that it goes on at
		// once if a heartbeat is confirmed before anything moved.
		if !v.fenced {
			v.fenced = true
			v.cfg.Logger.Warn("no heartbeat confirmed within the lease, or the connection is down: this replica claims and fires nothing until a heartbeat is confirmed",
				"replica", v.cfg.ReplicaID)
		}
		return o, false, acksMoved
	}
	if v.fenced {
		v.fenced, changed = false, true
		v.cfg.Logger.Info("heartbeats confirmed again: this replica claims and fires in its partitions again", "replica", v.cfg.ReplicaID)
	}
	parts := share(live, v.cfg.Partitions, v.cfg.ReplicaID)
	if !slices.Equal(parts, v.parts) {
		changed = true
		acksMoved = v.takeAcks(parts, now) || acksMoved
		v.cfg.Logger.Info("partitions owned", "replica", v.cfg.ReplicaID, "owned", count(parts), "of", v.cfg.Partitions, "members", len(live))
		v.parts = parts
	}
	o.Parts, o.N = v.parts, count(v.parts)
	return o, changed, acksMoved
}

// takeAcks takes the acks of the partitions of parts, and keeps those of a lost partition for a
// lease, so that an ack that arrives during a move is applied by someone.
func (v *view) takeAcks(parts []bool, now time.Time) (moved bool) {
	for p, own := range parts {
		switch {
		case own && v.acks[p]:
			delete(v.grace, p)
		case own:
			v.acks[p], moved = true, true
		case v.acks[p]:
			if _, ok := v.grace[p]; !ok {
				v.grace[p] = now.Add(v.cfg.Lease)
			}
		}
	}
	return moved
}

// graceEnds stops the acks of the partitions whose grace is over.
func (v *view) graceEnds(now time.Time) (moved bool) {
	for p, end := range v.grace {
		if !now.Before(end) {
			v.acks[p], moved = false, true
			delete(v.grace, p)
		} else {
			v.next = minTime(v.next, end)
		}
	}
	return moved
}

// sweep returns, once a lease, the partitions neither owned nor taking acks; nil if none or not due.
func (v *view) sweep(now time.Time) []bool {
	if now.Before(v.sweepAt) {
		v.next = minTime(v.next, v.sweepAt)
		return nil
	}
	v.sweepAt = now.Add(v.cfg.Lease)
	v.next = minTime(v.next, v.sweepAt)
	gone := make([]bool, v.cfg.Partitions)
	some := false
	for p := range gone {
		if (p >= len(v.parts) || !v.parts[p]) && !v.acks[p] {
			gone[p], some = true, true
		}
	}
	if !some {
		return nil
	}
	return gone
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
