package timingwheel_test

import (
	"math"
	"slices"
	"testing"

	"github.com/axbridge/axbridge/timingwheel"
)

// advance calls x.Advance(now) and returns the ids it reports, in order.
func advance(x *timingwheel.Index, now int64) []string {
	var ids []string
	x.Advance(now, func(e timingwheel.Entry) { ids = append(ids, e.ID) })
	return ids
}

// popAll pops queue q empty and returns the ids, in order.
func popAll(x *timingwheel.Index, q int) []string {
	var ids []string
	for {
		e, ok := x.Pop(q)
		if !ok {
			return ids
		}
		ids = append(ids, e.ID)
	}
}

func put(x *timingwheel.Index, id string, due int64) {
	x.Put(0, timingwheel.Entry{ID: id, Due: due})
}

func wantIDs(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s: %q, want %q", what, got, want)
	}
}

// Until the first Advance every entry is far; then the window is [cur, cur+span): an entry due at
// cur+span-1 is in it, one due at cur+span enters when cur moves by one.
func TestWheelWindowEdges(t *testing.T) {
	t.Parallel()
	x := timingwheel.NewWheel(1, 10)
	put(x, "early", 95)
	put(x, "last-in", 109)
	wantIDs(t, "first Advance(100)", advance(x, 100), "early", "last-in")
	put(x, "edge-in", 109)
	put(x, "edge-out", 110)
	put(x, "far", 200)
	wantIDs(t, "Advance(100) again", advance(x, 100))
	if at, ok := x.Entering(0); !ok || at != 101 {
		t.Errorf("Entering after Advance(100) = %d, %v; want 101 (edge-out, due 110)", at, ok)
	}
	wantIDs(t, "Advance(101)", advance(x, 101), "edge-out")
	wantIDs(t, "Advance(190)", advance(x, 190))
	wantIDs(t, "Advance(191)", advance(x, 191), "far")
	if at, ok := x.Entering(0); ok {
		t.Errorf("Entering with nothing far = %d, true", at)
	}
	wantIDs(t, "pops", popAll(x, 0), "early", "last-in", "edge-in", "edge-out", "far")
}

// With a span of 1 the window is cur alone.
func TestWheelSpanOne(t *testing.T) {
	t.Parallel()
	x := timingwheel.NewWheel(1, 1)
	advance(x, 5)
	put(x, "now", 5)
	put(x, "next", 6)
	put(x, "before", 4)
	if n, earliest := x.CountDue(0, 6, 0); n != 3 || earliest != 4 {
		t.Errorf("CountDue(0, 6, 0) = %d, %d; want 3, 4", n, earliest)
	}
	wantIDs(t, "Advance(6)", advance(x, 6), "next")
	wantIDs(t, "Advance(7)", advance(x, 7))
	wantIDs(t, "pops", popAll(x, 0), "before", "now", "next")
}

// An overdue put, or a jump of more than the span, goes to late; Advance back moves nothing.
func TestWheelLate(t *testing.T) {
	t.Parallel()
	x := timingwheel.NewWheel(1, 4)
	advance(x, 100)
	put(x, "slot", 102)
	put(x, "far", 120)
	put(x, "overdue", 50)
	wantIDs(t, "Advance(90)", advance(x, 90))
	wantIDs(t, "Advance(1000)", advance(x, 1000), "far")
	put(x, "overdue-2", 101)
	put(x, "now", 1000)
	if n, earliest := x.CountDue(0, 1000, 0); n != 5 || earliest != 50 {
		t.Errorf("CountDue(0, 1000, 0) = %d, %d; want 5, 50", n, earliest)
	}
	wantIDs(t, "pops", popAll(x, 0), "overdue", "overdue-2", "slot", "far", "now")
}

// Remove takes an entry out of its slot or out of late, leaving the others in order.
func TestWheelRemove(t *testing.T) {
	t.Parallel()
	x := timingwheel.NewWheel(2, 8)
	advance(x, 10)
	for _, id := range []string{"a", "b", "c"} {
		put(x, id, 12)
	}
	put(x, "late-1", 3)
	put(x, "late-2", 4)
	x.Put(1, timingwheel.Entry{ID: "other", Due: 12})
	if !x.Remove("b") || !x.Remove("late-1") || x.Remove("b") {
		t.Fatal("Remove: want true for b and late-1, then false for b")
	}
	if x.Len() != 4 {
		t.Errorf("Len %d, want 4", x.Len())
	}
	if !x.Remove("a") || !x.Remove("c") {
		t.Fatal("Remove of the rest of the slot")
	}
	wantIDs(t, "queue 0", popAll(x, 0), "late-2")
	advance(x, 13) // the emptied slot passes, the other queue's joins late
	wantIDs(t, "queue 1", popAll(x, 1), "other")
}

// Ties keep insertion order across the insertion counter's wrap, in a slot and in far.
func TestWheelSeqWrap(t *testing.T) {
	t.Parallel()
	for _, x := range []*timingwheel.Index{timingwheel.New(1), timingwheel.NewWheel(1, 16)} {
		timingwheel.SetSeqForTest(x, math.MaxUint32-1)
		advance(x, 0)
		for _, id := range []string{"a", "b", "c", "d"} {
			put(x, id, 5)
			put(x, "far-"+id, 100)
		}
		wantIDs(t, "pops", popAll(x, 0), "a", "b", "c", "d", "far-a", "far-b", "far-c", "far-d")
	}
}

// PopSlot pops the entries that share the earliest due time, up to max, in insertion order.
func TestWheelPopSlot(t *testing.T) {
	t.Parallel()
	x := timingwheel.NewWheel(1, 100)
	advance(x, 0)
	for _, id := range []string{"a", "b", "c"} {
		put(x, id, 7)
	}
	put(x, "d", 8)
	var got []string
	collect := func(e timingwheel.Entry) { got = append(got, e.ID) }
	if n := x.PopSlot(0, 2, collect); n != 2 {
		t.Errorf("PopSlot(0, 2) = %d, want 2", n)
	}
	if n := x.PopSlot(0, 10, collect); n != 1 {
		t.Errorf("PopSlot(0, 10) = %d, want 1 (c, due with a and b)", n)
	}
	wantIDs(t, "popped", got, "a", "b", "c")
	if n := x.PopSlot(0, 10, collect); n != 1 || x.PopSlot(0, 10, collect) != 0 {
		t.Errorf("PopSlot of d, then of an empty queue")
	}
}

// The wheel's arithmetic does not overflow at the ends of int64.
func TestWheelExtremeTimes(t *testing.T) {
	t.Parallel()
	x := timingwheel.NewWheel(1, 1000)
	advance(x, math.MinInt64)
	put(x, "max", math.MaxInt64)
	put(x, "min", math.MinInt64)
	put(x, "zero", 0)
	wantIDs(t, "Advance(MaxInt64-5)", advance(x, math.MaxInt64-5), "zero", "max")
	if n, _ := x.CountDue(0, math.MaxInt64, 0); n != 3 {
		t.Errorf("CountDue at MaxInt64 = %d, want 3", n)
	}
	wantIDs(t, "pops", popAll(x, 0), "min", "zero", "max")
}

func TestNewWheelRefusesSpans(t *testing.T) {
	t.Parallel()
	for _, span := range []int64{0, -1, 1<<20 + 1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewWheel(1, %d) did not panic", span)
				}
			}()
			timingwheel.NewWheel(1, span)
		}()
	}
}

// An index from New ignores Advance.
func TestAdvanceWithoutWheel(t *testing.T) {
	t.Parallel()
	x := timingwheel.New(1)
	put(x, "a", 5)
	wantIDs(t, "Advance", advance(x, 10))
	wantIDs(t, "pops", popAll(x, 0), "a")
}

// PeekDue of an entry in a slot allocates nothing either.
func TestWheelPeekDueAllocs(t *testing.T) {
	x := timingwheel.NewWheel(1, 1000)
	advance(x, 0)
	put(x, "order-42", 700)
	if a := testing.AllocsPerRun(100, func() {
		if due, ok := x.PeekDue(0); !ok || due != 700 {
			t.Fatalf("PeekDue(0) = %d, %v; want 700", due, ok)
		}
	}); a != 0 {
		t.Errorf("PeekDue allocates %v times a call, want 0", a)
	}
}

// A queue added to a running wheel works as one made with it: its entries enter the span, are
// late once passed, and an entry moved into it by Put leaves its old queue.
func TestWheelAddQueue(t *testing.T) {
	x := timingwheel.NewWheel(1, 10)
	advance(x, 100)
	q := x.AddQueue()
	if q != 1 || x.Queues() != 2 {
		t.Fatalf("AddQueue %d, Queues %d; want 1, 2", q, x.Queues())
	}
	x.Put(q, timingwheel.Entry{ID: "far", Due: 150})
	x.Put(q, timingwheel.Entry{ID: "near", Due: 105})
	put(x, "moved", 103)
	x.Put(q, timingwheel.Entry{ID: "moved", Due: 103})
	wantIDs(t, "entering at 141", advance(x, 141), "far")
	wantIDs(t, "queue 0", popAll(x, 0))
	wantIDs(t, "queue 1", popAll(x, q), "moved", "near", "far")
	full := timingwheel.New(256)
	defer func() {
		if recover() == nil {
			t.Error("a 257th queue: no panic")
		}
	}()
	full.AddQueue()
}
