package membership

import "testing"

// The fence machine, transition by transition.
func TestFenceMachine(t *testing.T) {
	t.Parallel()
	st := func(p phase, wait, pause int) fenceState { return fenceState{phase: p, wait: wait, pause: pause} }
	for _, c := range []struct {
		from fenceState
		ev   event
		to   fenceState
	}{
		{st(owning, 2, 4), tick, st(owning, 0, 1)},
		{st(owning, 0, 1), expired, st(fenced, 0, 1)},
		{st(owning, 0, 1), down, st(leaving, 0, 1)},
		{st(owning, 0, 1), fencedLong, st(owning, 0, 1)},
		{st(fenced, 0, 1), tick, st(fenced, 0, 1)},
		{st(fenced, 1, 2), tick, st(leaving, 1, 2)},
		{st(fenced, 0, 1), fencedLong, st(overdue, 0, 1)},
		{st(fenced, 0, 1), renewed, st(owning, 0, 1)},
		{st(overdue, 0, 1), tick, st(leaving, 0, 1)},
		{st(overdue, 0, 1), renewed, st(owning, 0, 1)},
		{st(leaving, 0, 1), tick, st(leaving, 0, 1)},
		{st(leaving, 0, 1), down, st(leaving, 0, 1)},
		{st(leaving, 0, 1), renewed, st(leaving, 0, 1)},
		{st(leaving, 0, 1), leaveDone, st(left, 0, 1)},
		{st(leaving, 0, 1), leaveFailed, st(fenced, 0, 1)},
		{st(left, 0, 1), tick, st(joining, 1, 2)},
		{st(left, 2, 4), tick, st(left, 1, 4)},
		{st(left, 0, 8), tick, st(joining, 8, 8)},
		{st(left, 0, 1), down, st(left, 0, 1)},
		{st(left, 0, 1), renewed, st(left, 0, 1)},
		{st(joining, 1, 2), tick, st(joining, 1, 2)},
		{st(joining, 1, 2), renewed, st(owning, 1, 2)},
		{st(joining, 1, 2), joinDone, st(fenced, 1, 2)},
		{st(joining, 1, 2), down, st(leaving, 1, 2)},
		{st(owning, 1, 2), joinDone, st(owning, 1, 2)},
		{st(owning, 0, 1), duplicate, st(ousted, 0, 1)},
		{st(left, 2, 4), duplicate, st(ousted, 2, 4)},
		{st(ousted, 0, 1), renewed, st(ousted, 0, 1)},
		{st(ousted, 0, 1), tick, st(ousted, 0, 1)},
		{st(ousted, 0, 1), down, st(ousted, 0, 1)},
	} {
		if got := next(c.from, c.ev); got != c.to {
			t.Errorf("next(%v %+v, %v) = %v %+v, want %v %+v", c.from.phase, c.from, c.ev, got.phase, got, c.to.phase, c.to)
		}
	}
}
