package membership

// phase is where this replica stands in the fence machine.
type phase uint8

const (
	owning  phase = iota // a confirmed heartbeat holds the fence: it owns its share
	fenced               // no heartbeat confirmed in time: it owns nothing and heartbeats on
	overdue              // fenced for half a lease: it leaves at the next tick
	leaving              // its Leave is in flight
	left                 // its key is deleted: it waits some ticks, then joins
	joining              // the heartbeat of its join is in flight
	ousted               // another process writes its key: it owns nothing and writes nothing, for good
)

var phaseNames = [...]string{"owning", "fenced", "overdue", "leaving", "left", "joining", "ousted"}

func (p phase) String() string { return phaseNames[p] }

// event is what moves the fence machine.
type event uint8

const (
	tick        event = iota // a heartbeat tick while the connection is up
	expired                  // the fence ran out
	fencedLong               // half a lease has passed since the fence ran out
	renewed                  // a confirmed heartbeat moved the fence past now
	down                     // the connection has been down for a quarter of a lease
	leaveDone                // the Leave was confirmed
	leaveFailed              // the Leave failed
	joinDone                 // the join's heartbeat was answered, confirmed or not
	duplicate                // another process wrote this replica's key
)

var eventNames = [...]string{"tick", "expired", "fencedLong", "renewed", "down", "leaveDone", "leaveFailed", "joinDone", "duplicate"}

func (e event) String() string { return eventNames[e] }

// maxPause is the most ticks a replica waits between two joins (two leases).
const maxPause = 8

// fenceState is the fence machine's state.
type fenceState struct {
	phase phase
	wait  int // left: ticks to wait before the next join
	pause int // the wait after the next join that fails; 1 until a join, and again once owning at a tick
}

// initial is the state of a replica whose first heartbeat was confirmed.
var initial = fenceState{phase: owning, pause: 1}

// next is the fence machine. The shell acts on a transition: entering leaving starts a Leave,
// entering joining sends the join's heartbeat, entering fenced from owning and a tick that ends in
// owning or fenced send a heartbeat, and entering ousted reports the duplicate.
func next(s fenceState, e event) fenceState {
	if s.phase == ousted {
		return s
	}
	switch e {
	case duplicate:
		s.phase = ousted
	case tick:
		switch s.phase {
		case owning:
			s.wait, s.pause = 0, 1
		case fenced:
			if s.pause > 1 { // fenced since a join: it leaves again at once
				s.phase = leaving
			}
		case overdue:
			s.phase = leaving
		case left:
			if s.wait > 0 {
				s.wait--
				break
			}
			s.phase = joining
			s.wait, s.pause = s.pause, min(2*s.pause, maxPause)
		}
	case expired:
		if s.phase == owning {
			s.phase = fenced
		}
	case fencedLong:
		if s.phase == fenced {
			s.phase = overdue
		}
	case renewed:
		switch s.phase {
		case owning, fenced, overdue, joining:
			s.phase = owning
		}
	case down:
		switch s.phase {
		case owning, fenced, overdue, joining:
			s.phase = leaving
		}
	case leaveDone:
		if s.phase == leaving {
			s.phase = left
		}
	case leaveFailed:
		if s.phase == leaving {
			s.phase = fenced
		}
	case joinDone:
		if s.phase == joining {
			s.phase = fenced
		}
	}
	return s
}
