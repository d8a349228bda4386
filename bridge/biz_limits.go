package bridge

import (
	"time"

	"github.com/axbridge/axbridge/bridge/internal/sched"
)

// A bizType's max_in_flight and rate hold across all replicas: each replica takes a share of
// them, split among the live replicas of its view (sorted by id, the first ones taking one more
// of a remainder), and counts its share against what it sees in flight (sched, limits.go). When
// the view changes, each replica keeps, for a window, the smaller of its shares under the old and
// the new view, and a replica that joins others takes none during its first window: by then the
// attempts taken under the old shares have settled or their leases have ended, so that the sum
// of the shares in use never passes the setting. The window is the default ack wait plus the
// lease skew; an attempt with a longer Ax-Ack-Wait may outlive it.

// shareView is a view of n replicas, this one of rank rank; n 0 takes no share.
type shareView struct {
	n, rank int
	until   time.Time // a replaced view: its shares hold until then
}

// bizShares is the loop's state for turning settings into limits.
type bizShares struct {
	window  time.Duration
	started bool
	cur     shareView
	recent  []shareView
	dirty   bool            // something changed since the last limits
	warned  map[string]bool // bizTypes warned of a max_in_flight below the replica count
}

// observe takes the view of n replicas at rank; it reports whether the limits must be computed
// again (the view changed, or a window ended).
func (s *bizShares) observe(n, rank int, now time.Time) bool {
	v := shareView{n: max(n, 1), rank: rank}
	switch {
	case !s.started:
		s.started, s.cur, s.dirty = true, v, true
		if v.n > 1 { // joining others: no share during the first window
			s.recent = append(s.recent, shareView{until: now.Add(s.window)})
		}
	case v.n != s.cur.n || v.rank != s.cur.rank:
		old := s.cur
		old.until = now.Add(s.window)
		s.recent, s.cur, s.dirty = append(s.recent, old), v, true
	}
	kept := s.recent[:0]
	for _, r := range s.recent {
		if now.Before(r.until) {
			kept = append(kept, r)
		} else {
			s.dirty = true
		}
	}
	s.recent = kept
	return s.dirty
}

// limits is what settings ask of this replica now.
func (s *bizShares) limits(settings map[string]BizSettings) map[string]sched.Limit {
	s.dirty = false
	out := make(map[string]sched.Limit, len(settings))
	for biz, st := range settings {
		l := sched.NoLimit
		l.Paused = st.Paused
		if st.MaxInFlight > 0 {
			l.MaxInFlight = int(s.share(func(v shareView) float64 { return float64(shareOf(st.MaxInFlight, v.n, v.rank)) }))
		}
		if st.Rate > 0 {
			l.Rate = s.share(func(v shareView) float64 { return st.Rate / float64(v.n) })
			l.Burst = max(1, shareOf(st.burst(), s.cur.n, s.cur.rank))
		}
		out[biz] = l
	}
	return out
}

// share is the smallest of f over the views in use (0 for a view that takes none).
func (s *bizShares) share(f func(shareView) float64) float64 {
	m := f(s.cur)
	for _, v := range s.recent {
		if v.n == 0 {
			return 0
		}
		m = min(m, f(v))
	}
	return m
}

// shareOf is the share of total that the replica of rank rank takes among n.
func shareOf(total, n, rank int) int {
	q := total / n
	if rank < total%n {
		q++
	}
	return q
}

// applyLimits gives the core this replica's limits, when the settings or the view changed or a
// window ended.
func (l *loopState) applyLimits(settingsChanged bool) {
	b := l.b
	if !l.shares.observe(int(b.liveMembers.Load()), int(b.rank.Load()), l.now.Mono) && !settingsChanged {
		return
	}
	all := b.biz.all()
	l.c.SetLimits(l.shares.limits(all))
	n := l.shares.cur.n
	if l.shares.warned == nil {
		l.shares.warned = map[string]bool{}
	}
	for biz, st := range all {
		short := st.MaxInFlight > 0 && st.MaxInFlight < n
		if short && !l.shares.warned[biz] {
			b.log.Warn("max_in_flight is below the number of replicas: replicas with no share fire none of the bizType, and its tasks in their partitions wait",
				"biz_type", biz, "max_in_flight", st.MaxInFlight, "replicas", n, "what_to_do", "set max_in_flight to at least the replica count")
		}
		l.shares.warned[biz] = short
	}
}
