package sched

import (
	"time"

	"golang.org/x/time/rate"

	"github.com/axbridge/axbridge/kvstore/record"
)

// Per-bizType limits (issue 25): a bizType may be paused, bounded in the attempts it has in
// flight, and bounded in the fires it takes per second. The caller gives each bizType with
// settings this replica's share of them (SetLimits); the core takes no fire from a lane whose
// limit says no.
//
// In flight counts, for a bizType: the fires taken and not yet seen through (claimed, or given
// back), the RUNNING records of the partitions this core indexes, whoever claimed them (a
// partition that moved here brings the attempts of its old owner, or of a replica that died),
// and this replica's own claims in partitions it lost, until their lease ends. An attempt may be
// counted twice (by its old owner and by the partition's new one), never by nobody: while a watch
// is loading partitions, a bounded bizType takes nothing, for it does not know their RUNNING
// records yet.

// NoLimit is a Limit that bounds nothing.
var NoLimit = Limit{MaxInFlight: -1, Rate: -1}

// Limit is a bizType's settings as this replica applies them.
type Limit struct {
	Paused bool
	// MaxInFlight: this replica's share of the attempts in flight; -1: no bound.
	MaxInFlight int
	// Rate and Burst: this replica's share of the fires per second; Rate -1: no bound, 0: none
	// (a share of 0 takes no fire at all, not even a burst).
	Rate  float64
	Burst int
}

// bizLimit is a bizType's Limit and what applying it takes.
type bizLimit struct {
	Limit
	biz string
	q   int           // its fire queue (a lane of its own)
	rl  *rate.Limiter // nil: no rate bound
}

// runRec is a RUNNING record counted in flight.
type runRec struct {
	biz  string
	mine bool  // claimed by this replica
	due  int64 // UTC Unix ms: when its lease counts as ended here
	at   int64 // UTC Unix ms: the record's due time (List)
}

// limits is the core's state for SetLimits.
type limits struct {
	byBiz   map[string]*bizLimit
	byLane  map[int]*bizLimit
	running map[string]runRec // RUNNING records of the owned partitions
	runN    map[string]int    // running, by bizType
	away    map[string]runRec // this replica's claims in partitions it lost, until their lease ends
	awayN   map[string]int    // away, by bizType
	pend    map[int]int       // by lane: fires taken and not yet seen through
}

func newLimits() limits {
	return limits{byBiz: map[string]*bizLimit{}, byLane: map[int]*bizLimit{}, running: map[string]runRec{},
		runN: map[string]int{}, away: map[string]runRec{}, awayN: map[string]int{}, pend: map[int]int{}}
}

// SetLimits replaces the limits of every bizType: those not in m bound nothing. A bizType with a
// limit gets a fire lane of its own.
func (c *Core) SetLimits(m map[string]Limit) {
	old := c.lim.byBiz
	c.lim.byBiz, c.lim.byLane = make(map[string]*bizLimit, len(m)), make(map[int]*bizLimit, len(m))
	for biz, l := range m {
		if l == NoLimit {
			continue
		}
		bl := &bizLimit{Limit: l, biz: biz, q: c.idx.dedicate(biz)}
		switch o := old[biz]; {
		case l.Rate < 0:
		case o != nil && o.rl != nil: // keep its tokens: a change of rate applies from now on
			bl.rl = o.rl
			bl.rl.SetLimitAt(c.now.Mono, rate.Limit(l.Rate))
			bl.rl.SetBurstAt(c.now.Mono, max(l.Burst, 1))
		default:
			bl.rl = rate.NewLimiter(rate.Limit(l.Rate), max(l.Burst, 1))
		}
		c.lim.byBiz[biz], c.lim.byLane[bl.q] = bl, bl
	}
}

// InFlight is what the core counts in flight for bizType.
func (c *Core) InFlight(bizType string) int {
	n := c.lim.runN[bizType] + c.lim.awayN[bizType]
	if bl := c.lim.byBiz[bizType]; bl != nil {
		n += c.lim.pend[bl.q]
	}
	return n
}

// paused reports whether lane q is paused.
func (c *Core) paused(q int) bool {
	bl := c.lim.byLane[q]
	return bl != nil && bl.Paused
}

// PausedDue is how many due fires the last Overdue found in paused lanes (it counts them apart).
func (c *Core) PausedDue() int { return c.pausedDue }

// open reports whether a fire may be taken from lane q now (take then spends its rate's token).
func (c *Core) open(q int) bool {
	at, ok := c.opensAt(q, c.now.Ms)
	return ok && at <= c.now.Ms
}

// inFlightFull reports whether bl's bizType has its share in flight.
func (c *Core) inFlightFull(bl *bizLimit) bool { return c.InFlight(bl.biz) >= bl.MaxInFlight }

// expireAway stops counting the claims in lost partitions whose lease has ended.
func (c *Core) expireAway() {
	for id, r := range c.lim.away {
		if r.due <= c.now.Ms {
			c.untrack(id)
		}
	}
}

// spend takes a token of lane q's rate, if it has one.
func (c *Core) spend(q int) {
	if bl := c.lim.byLane[q]; bl != nil && bl.rl != nil {
		bl.rl.AllowN(c.now.Mono, 1)
	}
}

// opensAt is the earliest a fire due at due can be taken from lane q: due, or later if the lane
// waits for a token of its rate; false if it waits for something else (pause, in flight).
func (c *Core) opensAt(q int, due int64) (int64, bool) {
	bl := c.lim.byLane[q]
	switch {
	case bl == nil:
		return due, true
	case bl.Paused, bl.MaxInFlight >= 0 && (c.loading || c.inFlightFull(bl)):
		return 0, false
	case bl.rl != nil && bl.Rate <= 0: // a share of 0 takes none, not even the limiter's first burst
		return 0, false
	case bl.rl != nil:
		tok := bl.rl.TokensAt(c.now.Mono)
		if tok >= 1 {
			return due, true
		}
		wait := time.Duration((1 - tok) / float64(bl.rl.Limit()) * float64(time.Second))
		return max(due, record.AddMs(c.now.Ms, wait+time.Millisecond)), true
	}
	return due, true
}

// track counts e in flight if it is RUNNING, and stops counting its task's older revision.
func (c *Core) track(e *record.Entry) {
	id := e.Task.ID
	c.untrack(id)
	if e.Task.Status != record.StatusRunning {
		return
	}
	r := runRec{biz: e.Task.BizType, mine: e.Task.Owner == c.cfg.Replica, due: c.leaseDue(&e.Task), at: e.Task.DueAt}
	c.lim.running[id] = r
	c.lim.runN[r.biz]++
}

// untrack stops counting task id in flight.
func (c *Core) untrack(id string) {
	if r, ok := c.lim.running[id]; ok {
		delete(c.lim.running, id)
		if c.lim.runN[r.biz]--; c.lim.runN[r.biz] == 0 {
			delete(c.lim.runN, r.biz)
		}
	}
	if r, ok := c.lim.away[id]; ok {
		delete(c.lim.away, id)
		if c.lim.awayN[r.biz]--; c.lim.awayN[r.biz] == 0 {
			delete(c.lim.awayN, r.biz)
		}
	}
}

// trackLost keeps counting this replica's own claims in the partitions it no longer indexes
// until their leases end, and stops counting the rest of them.
func (c *Core) trackLost() {
	for id, r := range c.lim.running {
		if c.Owns(id) {
			continue
		}
		c.untrack(id)
		if r.mine {
			c.lim.away[id] = r
			c.lim.awayN[r.biz]++
		}
	}
}

// OldestDue is, by bizType with a lane of its own, the due time (UTC Unix ms) of its most overdue
// fire still indexed, for those with one due by now and not paused (the overdue alarm).
func (c *Core) OldestDue() map[string]int64 {
	out := map[string]int64{}
	for biz, q := range c.idx.lanes {
		if c.idx.shared[biz] || c.paused(q) {
			continue
		}
		if due, ok := c.idx.x.PeekDue(q); ok && due <= c.now.Ms {
			out[biz] = due
		}
	}
	return out
}
