package timingwheel

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

func ms(f float64) time.Time { return t0.Add(time.Duration(f * float64(time.Millisecond))) }

type fired struct {
	id  string
	due time.Time
	v   int
}

// collect runs Advance(now) and returns what fired, checking invariants after.
func collect(t *testing.T, w *Wheel[int], now time.Time) []fired {
	t.Helper()
	var got []fired
	w.Advance(now, func(id string, due time.Time, v int) {
		if due.After(now) {
			t.Errorf("%s fired early: due %v, now %v", id, due.Sub(t0), now.Sub(t0))
		}
		got = append(got, fired{id, due, v})
	})
	if err := w.check(); err != nil {
		t.Fatal(err)
	}
	return got
}

func ids(fs []fired) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.id
	}
	return out
}

func TestAdvance(t *testing.T) {
	t.Parallel()
	type add struct {
		id  string
		due time.Time
	}
	type step struct {
		now  time.Time
		want []string
	}
	tests := []struct {
		name  string
		opts  Options
		adds  []add
		steps []step
	}{
		{
			name:  "never early within a tick",
			adds:  []add{{"a", ms(10.7)}},
			steps: []step{{ms(10), nil}, {ms(10.69), nil}, {ms(10.7), []string{"a"}}, {ms(20), nil}},
		},
		{
			name:  "deadline order across slots",
			adds:  []add{{"c", ms(3)}, {"a", ms(1)}, {"b", ms(2.5)}, {"d", ms(3.2)}},
			steps: []step{{ms(2.9), []string{"a", "b"}}, {ms(5), []string{"c", "d"}}},
		},
		{
			name:  "deadline order within one slot",
			adds:  []add{{"c", ms(1.9)}, {"a", ms(1.1)}, {"b", ms(1.5)}},
			steps: []step{{ms(2), []string{"a", "b", "c"}}},
		},
		{
			name:  "ties in insertion order",
			adds:  []add{{"x", ms(5)}, {"y", ms(5)}, {"a", ms(5)}, {"b", ms(5)}},
			steps: []step{{ms(5), []string{"x", "y", "a", "b"}}},
		},
		{
			name:  "ties in insertion order across heap and wheel",
			opts:  Options{Tick: time.Millisecond, Slots: 4},
			adds:  []add{{"far", ms(10)}, {"near", ms(3)}},
			steps: []step{{ms(8), []string{"near"}}, {ms(10), []string{"far"}}},
		},
		{
			name:  "past and before-start entries fire on the next Advance",
			adds:  []add{{"late", ms(-5)}, {"now", ms(0)}, {"older", t0.Add(-time.Hour)}},
			steps: []step{{ms(0), []string{"older", "late", "now"}}},
		},
		{
			name: "far future beyond the horizon",
			opts: Options{Tick: time.Millisecond, Slots: 8},
			adds: []add{{"hour", ms(3_600_000)}, {"min", ms(60_000)}, {"near", ms(4)}},
			steps: []step{
				{ms(59_999.9), []string{"near"}},
				{ms(60_000), []string{"min"}},
				{ms(3_599_999), nil},
				{ms(3_600_000), []string{"hour"}},
			},
		},
		{
			name:  "one big jump fires everything in order",
			opts:  Options{Tick: time.Millisecond, Slots: 16},
			adds:  []add{{"e", ms(900)}, {"b", ms(20)}, {"d", ms(400)}, {"a", ms(1)}, {"c", ms(20.5)}},
			steps: []step{{ms(1000), []string{"a", "b", "c", "d", "e"}}},
		},
		{
			name:  "a clock stepping back fires only what is due",
			adds:  []add{{"a", ms(1)}, {"b", ms(3)}},
			steps: []step{{ms(2), []string{"a"}}, {ms(1.5), nil}, {ms(3), []string{"b"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := New[int](t0, tt.opts)
			distinct := map[string]bool{}
			for i, a := range tt.adds {
				w.Add(a.id, a.due, i)
				distinct[a.id] = true
			}
			if w.Len() != len(distinct) {
				t.Fatalf("Len = %d after adding %d ids", w.Len(), len(distinct))
			}
			for _, s := range tt.steps {
				if got := ids(collect(t, w, s.now)); !slices.Equal(got, s.want) {
					t.Errorf("Advance(%v) fired %v, want %v", s.now.Sub(t0), got, s.want)
				}
			}
			if w.Len() != 0 {
				t.Errorf("Len = %d after all steps", w.Len())
			}
		})
	}
}

func TestAddReplacesPending(t *testing.T) {
	t.Parallel()
	w := New[int](t0, Options{})
	h := w.AddHandle("a", ms(10), 1)
	w.Add("a", ms(5000), 2)
	if w.Len() != 1 {
		t.Fatalf("Len = %d after adding one id twice", w.Len())
	}
	if w.RemoveHandle(h) {
		t.Fatal("RemoveHandle of the replaced entry = true")
	}
	if due, v, ok := w.Get("a"); !ok || !due.Equal(ms(5000)) || v != 2 {
		t.Fatalf("Get = %v %d %v", due.Sub(t0), v, ok)
	}
	if got := collect(t, w, ms(4999)); len(got) != 0 {
		t.Fatalf("fired %v before the new due time", got)
	}
	if got := collect(t, w, ms(5000)); len(got) != 1 || got[0].v != 2 || w.Len() != 0 {
		t.Fatalf("fired %v, Len %d", got, w.Len())
	}
}

// AddAfter(id, now, d) schedules at now.Add(d), to the nanosecond, for a
// wall-clock time and for one with a monotonic reading, and saturates where
// now.Add(d) does.
func TestAddAfter(t *testing.T) {
	t.Parallel()
	delays := []time.Duration{
		0, 1, 10*time.Millisecond + 700*time.Microsecond, 30 * time.Second,
		5 * time.Hour, 400 * 24 * time.Hour, -5 * time.Second, -time.Hour,
		math.MaxInt64, math.MinInt64,
	}
	for _, start := range []time.Time{t0, time.Now()} {
		w := New[int](start, Options{})
		for k, now := range []time.Time{start, start.Add(1500 * time.Millisecond), start.Add(-time.Minute)} {
			for i, d := range delays {
				after, abs := fmt.Sprintf("after-%d-%d", k, i), fmt.Sprintf("abs-%d-%d", k, i)
				w.AddAfter(after, now, d, i)
				w.Add(abs, now.Add(d), i)
				got, v, ok := w.Get(after)
				want, _, _ := w.Get(abs)
				if !ok || v != i || got.Sub(start) != want.Sub(start) {
					t.Errorf("AddAfter(now %v, %v): due %v (ok %v, v %d), Add(now.Add(d)): %v",
						now.Sub(start), d, got.Sub(start), ok, v, want.Sub(start))
				}
			}
		}
		// Nothing fires early, and each pair fires together.
		now := start.Add(30 * time.Second)
		var gotIDs []string
		w.Advance(now, func(id string, due time.Time, _ int) {
			if due.After(now) {
				t.Errorf("%s fired early: due %v, now %v", id, due.Sub(start), now.Sub(start))
			}
			gotIDs = append(gotIDs, id)
		})
		afters, abss := 0, 0
		for _, id := range gotIDs {
			if strings.HasPrefix(id, "after-") {
				afters++
			} else {
				abss++
			}
		}
		if afters != abss || afters == 0 {
			t.Errorf("fired %d by AddAfter and %d by Add: %v", afters, abss, gotIDs)
		}
	}
}

func TestRemoveAndReschedule(t *testing.T) {
	t.Parallel()
	w := New[int](t0, Options{Tick: time.Millisecond, Slots: 8})
	w.Add("wheel", ms(3), 1)
	w.Add("heap", ms(100), 2)
	w.Add("gone", ms(2), 3)
	if !w.Remove("gone") || w.Remove("gone") || w.Remove("never") {
		t.Fatal("Remove results wrong")
	}
	if !w.Reschedule("wheel", ms(200)) || !w.Reschedule("heap", ms(1)) || w.Reschedule("never", ms(1)) {
		t.Fatal("Reschedule results wrong")
	}
	if _, v, _ := w.Get("heap"); v != 2 {
		t.Fatalf("Reschedule lost the value: %d", v)
	}
	if got := ids(collect(t, w, ms(150))); !slices.Equal(got, []string{"heap"}) {
		t.Fatalf("fired %v", got)
	}
	if w.Remove("heap") || w.Reschedule("heap", ms(300)) {
		t.Fatal("Remove or Reschedule of a fired entry returned true")
	}
	if _, _, ok := w.Get("heap"); ok {
		t.Fatal("Get found a fired entry")
	}
	if got := ids(collect(t, w, ms(200))); !slices.Equal(got, []string{"wheel"}) {
		t.Fatalf("fired %v", got)
	}
}

func TestHandles(t *testing.T) {
	t.Parallel()
	w := New[int](t0, Options{})
	old := w.AddHandle("a", ms(5), 1)
	h := w.AddHandle("a", ms(7), 2) // replaces the entry: old goes stale
	if h == old || w.RemoveHandle(old) {
		t.Fatal("the handle of a replaced entry still works")
	}
	w.Reschedule("a", ms(9000)) // keeps the entry and its handle
	if !w.RemoveHandle(h) || w.RemoveHandle(h) {
		t.Fatal("RemoveHandle: want true once, then false")
	}
	if w.RemoveHandle(Handle{}) {
		t.Fatal("the zero Handle removed something")
	}
	// A stale handle must not remove the entry that reuses its node.
	hb := w.AddHandle("b", ms(1), 1)
	collect(t, w, ms(1))
	w.Add("c", ms(2), 2)
	if w.RemoveHandle(hb) || w.Len() != 1 {
		t.Fatalf("stale handle removed a live entry; Len %d", w.Len())
	}
}

func TestNext(t *testing.T) {
	t.Parallel()
	w := New[int](t0, Options{Tick: time.Millisecond, Slots: 8})
	if _, ok := w.Next(); ok {
		t.Fatal("Next ok on an empty wheel")
	}
	w.Add("heap", ms(50), 0)
	if next, _ := w.Next(); !next.Equal(ms(50)) {
		t.Fatalf("Next = %v, want the heap entry's due time", next.Sub(t0))
	}
	w.Add("wheel", ms(2.5), 0)
	if next, _ := w.Next(); !next.Equal(ms(2.5)) {
		t.Fatalf("Next = %v, want 2.5ms", next.Sub(t0))
	}
	collect(t, w, ms(2.2)) // within the slot, before its entry
	if next, _ := w.Next(); !next.Equal(ms(2.5)) {
		t.Fatalf("Next = %v after a partial slot, want 2.5ms", next.Sub(t0))
	}
	w.Add("past", ms(1), 0)
	if next, _ := w.Next(); next.After(ms(1)) {
		t.Fatalf("Next = %v with an overdue entry at 1ms", next.Sub(t0))
	}
}

func TestNextOnLongSlotNeverLate(t *testing.T) {
	t.Parallel()
	w := New[int](t0, Options{})
	for i := range 200 {
		w.Add(fmt.Sprint(i), ms(7.999-float64(i)/1000), i)
	}
	next, _ := w.Next()
	if want := ms(7.999 - 0.199); next.After(want) || !next.After(t0) {
		t.Fatalf("Next = %v, want in (0, %v]", next.Sub(t0), want.Sub(t0))
	}
}

func TestReentrantFire(t *testing.T) {
	t.Parallel()
	w := New[int](t0, Options{})
	w.Add("a", ms(1), 0)
	w.Add("b", ms(2), 0)
	w.Add("c", ms(3), 0)
	var got []string
	w.Advance(ms(3), func(id string, _ time.Time, _ int) {
		got = append(got, id)
		switch id {
		case "a":
			w.Remove("b")              // not fired later in this call
			w.Add("again", ms(0.5), 0) // due now: fires on the next Advance
			w.Add("later", ms(2.5), 0) // due now: fires on the next Advance
			w.Add("future", ms(9), 0)  // not due
			w.Reschedule("c", ms(2.9)) // rescheduled during Advance: next Advance
		}
	})
	if !slices.Equal(got, []string{"a"}) {
		t.Fatalf("first Advance fired %v", got)
	}
	if got := ids(collect(t, w, ms(3))); !slices.Equal(got, []string{"again", "later", "c"}) {
		t.Fatalf("second Advance fired %v", got)
	}
	if w.Len() != 1 {
		t.Fatalf("Len = %d, want 1", w.Len())
	}
	// A fire that re-arms itself at a past time does not loop.
	n := 0
	w.Add("loop", ms(1), 0)
	w.Advance(ms(4), func(id string, _ time.Time, _ int) {
		n++
		w.Add(id, ms(1), 0)
	})
	if n != 1 {
		t.Fatalf("self re-arming entry fired %d times in one Advance", n)
	}
}

func TestAdvanceFromFirePanics(t *testing.T) {
	t.Parallel()
	w := New[int](t0, Options{})
	w.Add("a", ms(1), 0)
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
		if err := w.check(); err != nil {
			t.Fatal(err)
		}
	}()
	w.Advance(ms(1), func(string, time.Time, int) { w.Advance(ms(2), nil) })
}

func TestNewPanicsOnBadOptions(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{{Slots: 3}, {Tick: -1}, {Slots: -4}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%+v) did not panic", o)
				}
			}()
			New[int](t0, o)
		}()
	}
}

func TestManyEntries(t *testing.T) {
	t.Parallel()
	w := New[int](t0, Options{Tick: time.Millisecond, Slots: 64})
	const n = 20000
	for i := range n {
		// Spread over 0–2s, added in a scrambled order.
		j := (i * 7919) % n
		w.Add(fmt.Sprint(j), ms(float64(j)/10), j)
	}
	if err := w.check(); err != nil {
		t.Fatal(err)
	}
	last, count := -1, 0
	for now := 0.0; now < 2003.3; now += 3.3 {
		for _, f := range collect(t, w, ms(min(now, 2000))) {
			if f.v <= last {
				t.Fatalf("out of order: %d after %d", f.v, last)
			}
			last = f.v
			count++
		}
	}
	if count != n || w.Len() != 0 {
		t.Fatalf("fired %d of %d, Len %d", count, n, w.Len())
	}
}

// TestReentrantFireSameSlot covers a fire that removes or moves the entry due
// next in the same slot, in a slot kept in deadline order and in one that is not.
func TestReentrantFireSameSlot(t *testing.T) {
	t.Parallel()
	for _, order := range [][]string{{"a", "b", "c", "d"}, {"d", "c", "b", "a"}} {
		w := New[int](t0, Options{})
		due := map[string]time.Time{"a": ms(1.1), "b": ms(1.2), "c": ms(1.3), "d": ms(1.4)}
		for _, id := range order {
			w.Add(id, due[id], 0)
		}
		var got []string
		w.Advance(ms(2), func(id string, _ time.Time, _ int) {
			got = append(got, id)
			if id == "a" {
				w.Remove("b")
				w.Reschedule("c", ms(1.5)) // due at or before now: the next Advance
				w.Add("e", ms(1.0), 0)     // likewise
			}
		})
		if !slices.Equal(got, []string{"a", "d"}) {
			t.Fatalf("added %v: first Advance fired %v", order, got)
		}
		if got := ids(collect(t, w, ms(2))); !slices.Equal(got, []string{"e", "c"}) {
			t.Fatalf("added %v: second Advance fired %v", order, got)
		}
	}
}

// TestIDLengths covers ids kept in the node (up to idInline bytes, the empty
// id included) and longer ones, ids that share their first idInline bytes,
// and fired ids staying intact after their nodes are reused.
func TestIDLengths(t *testing.T) {
	t.Parallel()
	var all []string
	for _, n := range []int{0, 1, idInline - 1, idInline, idInline + 1, 100} {
		for _, last := range "ab" {
			if n == 0 && last == 'b' {
				continue
			}
			id := ""
			if n > 0 {
				id = fmt.Sprintf("%0*d%c", n-1, 0, last)
			}
			all = append(all, id)
		}
	}
	w := New[int](t0, Options{})
	for i, id := range all {
		w.Add(id, ms(float64(10+i)), i)
	}
	if w.Len() != len(all) {
		t.Fatalf("Len = %d after adding %d ids", w.Len(), len(all))
	}
	for i, id := range all {
		if due, v, ok := w.Get(id); !ok || v != i || !due.Equal(ms(float64(10+i))) {
			t.Fatalf("Get(%q) = %v, %d, %v", id, due.Sub(t0), v, ok)
		}
		w.Add(id, ms(float64(10+i)), i) // replaces it
	}
	if w.Get(all[len(all)-1] + "x"); w.Len() != len(all) {
		t.Fatalf("Len %d, want %d", w.Len(), len(all))
	}
	if err := w.check(); err != nil {
		t.Fatal(err)
	}
	got := ids(collect(t, w, ms(1000)))
	if !slices.Equal(got, all) {
		t.Fatalf("fired %q, want %q", got, all)
	}
	kept := slices.Clone(got)
	// Reuse every node with other ids, then fire them too.
	for i := range 200 {
		w.Add(fmt.Sprintf("other-%03d-%040d", i, i), ms(2000), i)
	}
	for _, id := range all {
		w.Add(id+"!", ms(2000), 0)
		if !w.Remove(id + "!") {
			t.Fatalf("Remove(%q) = false", id+"!")
		}
	}
	if n := len(collect(t, w, ms(3000))); n != 200 {
		t.Fatalf("fired %d, want 200", n)
	}
	for i, id := range kept {
		if id != all[i] {
			t.Fatalf("fired id %d changed to %q, was %q", i, id, all[i])
		}
	}
}

// TestSweep removes most entries of a large wheel: the zombies they leave
// are freed by a sweep that goes a bounded number of nodes per call, and
// their nodes are reused.
func TestSweep(t *testing.T) {
	t.Parallel()
	w := New[int](t0, Options{})
	const n = 50000
	for i := range n {
		w.Add(fmt.Sprint(i), ms(60_000+float64(i)), i) // level 1, never fired here
	}
	swept := false
	for i := range n - 1000 {
		if !w.Remove(fmt.Sprint(i)) {
			t.Fatalf("Remove(%d) = false", i)
		}
		swept = swept || w.sweepAt >= 0
		if w.sweepAt >= 0 && w.listZombies > 2*max(w.Len(), w.sweepFloor) {
			t.Fatalf("%d zombies for %d pending during a sweep", w.listZombies, w.Len())
		}
	}
	if !swept {
		t.Fatal("no sweep started")
	}
	// Drive the sweep in progress, if any, to its end.
	for k := 0; w.sweepAt >= 0 && k < n; k++ {
		w.Remove("absent")
	}
	if w.sweepAt >= 0 || w.listZombies > max(w.Len(), w.sweepFloor) {
		t.Fatalf("sweep at %d, %d zombies for %d pending", w.sweepAt, w.listZombies, w.Len())
	}
	if err := w.check(); err != nil {
		t.Fatal(err)
	}
	used := w.slab.used
	for i := range n - 1000 {
		w.Add(fmt.Sprint("again-", i), ms(60_000), i)
	}
	if w.slab.used >= used+n-1000 {
		t.Fatalf("slab grew from %d to %d: freed nodes not reused", used, w.slab.used)
	}
	if got := len(collect(t, w, ms(200_000))); got != n {
		t.Fatalf("fired %d, want %d", got, n)
	}
}

// TestSweepOnReplace: an Add of a pending id leaves the replaced entry a
// zombie, as a Remove does, and those zombies start the sweep too. Every id
// then fires once, at its last due time.
func TestSweepOnReplace(t *testing.T) {
	t.Parallel()
	w := New[int](t0, Options{})
	w.sweepFloor = 1000
	const n = 5000
	swept := false
	for round := range 4 {
		for i := range n {
			w.Add(fmt.Sprint(i), ms(60_000+float64(round*n+i)), round) // level 1
			w.flush()
			swept = swept || w.sweepAt >= 0
			if w.listZombies > 2*max(w.Len(), w.sweepFloor) {
				t.Fatalf("%d zombies for %d pending", w.listZombies, w.Len())
			}
		}
	}
	if !swept {
		t.Fatal("no sweep started")
	}
	if err := w.check(); err != nil {
		t.Fatal(err)
	}
	got := collect(t, w, ms(200_000))
	if len(got) != n {
		t.Fatalf("fired %d, want %d", len(got), n)
	}
	seen := make(map[string]bool, n)
	for _, f := range got {
		i, err := strconv.Atoi(f.id)
		if err != nil || seen[f.id] {
			t.Fatalf("fired %q: unknown or twice", f.id)
		}
		seen[f.id] = true
		if want := ms(60_000 + float64(3*n+i)); f.v != 3 || !f.due.Equal(want) {
			t.Fatalf("%s fired with value %d due %v, not the last Add's 3 due %v", f.id, f.v, f.due.Sub(t0), want.Sub(t0))
		}
	}
}

// TestNextFreesZombies: after many near-term entries are removed, Next passes
// over their slots to the next pending entry once, freeing what it passes.
func TestNextFreesZombies(t *testing.T) {
	t.Parallel()
	w := New[int](t0, Options{})
	w.sweepFloor = 1 << 30 // no sweep: Next alone must free them
	const n = 20000
	for i := range n {
		w.Add(fmt.Sprint(i), ms(1000+float64(i)/5), i) // 1–5 s, level 0
	}
	w.Add("last", ms(7000), -1)
	for i := range n {
		w.Remove(fmt.Sprint(i))
	}
	if w.listZombies != n {
		t.Fatalf("%d zombies after removing %d", w.listZombies, n)
	}
	if next, ok := w.Next(); !ok || !next.Equal(ms(7000)) {
		t.Fatalf("Next = %v %v, want 7s", next.Sub(t0), ok)
	}
	if w.listZombies != 0 {
		t.Fatalf("%d zombies left after Next", w.listZombies)
	}
	if err := w.check(); err != nil {
		t.Fatal(err)
	}
}

// TestIndexMove: when the index outgrows its table, entries move to the new
// one a few per insert; lookups find both moved and unmoved entries, and the
// position an entry leaves behind in the old table never matches again, even
// for the same id in the same node.
func TestIndexMove(t *testing.T) {
	t.Parallel()
	w := New[int](t0, Options{})
	check := func() {
		t.Helper()
		if err := w.check(); err != nil {
			t.Fatal(err)
		}
	}
	w.Add("a", ms(1), 0) // node 0, the first a move visits
	w.Len()
	k := 0
	for ; !w.index.moving(); k++ {
		w.Add(fmt.Sprint(k), ms(1000), k)
		w.Len() // index each Add on its own: one insert, one move step
		check()
	}
	if n := w.slab.at(0); n.pos&posTable != w.index.bit {
		t.Fatalf("a (pos %#x) has not moved to the current table (bit %#x)", n.pos, w.index.bit)
	}
	for j := range k {
		if _, v, ok := w.Get(fmt.Sprint(j)); !ok || v != j {
			t.Fatalf("Get(%d) = %d %v while moving", j, v, ok)
		}
	}
	// Fire a: node 0 goes back to the free list; the old table still holds
	// a's former position, and entries are still moving.
	if got := ids(collect(t, w, ms(1))); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("fired %v, want [a]", got)
	}
	if !w.index.moving() {
		t.Fatal("the move ended early: the test needs it in progress")
	}
	w.Add("a", ms(2), 1) // reuses node 0
	if w.Len(); w.slab.at(0).idLen == 0 {
		t.Fatal("a is not in node 0")
	}
	check()
	if _, v, ok := w.Get("a"); !ok || v != 1 {
		t.Fatalf("Get(a) = %d %v", v, ok)
	}
	for ; w.index.moving(); k++ {
		w.Add(fmt.Sprint(k), ms(1000), k)
		check()
	}
	if got := len(collect(t, w, ms(1000))); got != k+1 {
		t.Fatalf("fired %d, want %d", got, k+1)
	}
}

// TestReplaceWhileMoving: adding an id that is pending in the old table,
// while entries still move out of it, replaces that entry: the new one is
// indexed in the current table, the old one never fires, and Len counts the
// id once.
func TestReplaceWhileMoving(t *testing.T) {
	t.Parallel()
	w := New[int](t0, Options{})
	k := 0
	for ; !w.index.moving(); k++ {
		w.Add(fmt.Sprint(k), ms(1000), k)
		w.Len() // index each Add on its own
	}
	old := -1
	for j := range k {
		i, ok := lookup(&w.index, &w.slab, fmt.Sprint(j))
		if ok && w.slab.at(i).pos&posTable != w.index.bit {
			old = j
			break
		}
	}
	if old < 0 {
		t.Fatal("no entry left in the old table: the test needs one")
	}
	id := fmt.Sprint(old)
	w.Add(id, ms(500), -1)
	if got := w.Len(); got != k {
		t.Fatalf("Len = %d after replacing %s, want %d", got, id, k)
	}
	if err := w.check(); err != nil {
		t.Fatal(err)
	}
	if due, v, ok := w.Get(id); !ok || v != -1 || !due.Equal(ms(500)) {
		t.Fatalf("Get(%s) = %v %d %v, want %v -1 true", id, due, v, ok, ms(500))
	}
	fired := collect(t, w, ms(1000))
	if len(fired) != k {
		t.Fatalf("fired %d, want %d", len(fired), k)
	}
	n := 0
	for _, f := range fired {
		if f.id == id {
			n++
			if f.v != -1 {
				t.Fatalf("%s fired with value %d, the replaced entry's", id, f.v)
			}
		}
	}
	if n != 1 {
		t.Fatalf("%s fired %d times, want once", id, n)
	}
}

// TestIndexGrowsInSteps: past a few dozen entries, growing the index never
// re-inserts everything in one call. Each Add, indexed on its own, moves at
// most step entries of the old table, and a new table always starts with a
// move rather than a rebuild.
func TestIndexGrowsInSteps(t *testing.T) {
	t.Parallel()
	w := New[int](t0, Options{})
	x := &w.index
	grows := 0
	for k := range 100_000 {
		size, oldLive := len(x.tags), x.oldLive
		w.Add(fmt.Sprint(k), ms(float64(1000+k%5000)), k)
		w.Len() // index this Add now
		if len(x.tags) != size {
			grows++
			if !x.moving() && size >= 64 {
				t.Fatalf("Add %d: the index went from %d to %d positions at once", k, size, len(x.tags))
			}
			continue
		}
		if moved := oldLive - x.oldLive; moved > x.step {
			t.Fatalf("Add %d moved %d entries, more than a step of %d", k, moved, x.step)
		}
	}
	if grows < 10 {
		t.Fatalf("the index grew %d times, want the test to see many", grows)
	}
	if err := w.check(); err != nil {
		t.Fatal(err)
	}
}
