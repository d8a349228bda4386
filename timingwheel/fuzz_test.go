package timingwheel

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"
)

// model is the naive reference: a map of pending entries, fired by sorting.
type model struct {
	pending map[string]modelEntry
	seq     int
	inst    int
	now     int64 // highest Advance time
}

type modelEntry struct {
	due  int64
	v    int
	seq  int // insertion order
	inst int // identity of this pending life of the id, for handles
}

// add schedules id, replacing a pending entry of the same id (whose handles
// go stale).
func (m *model) add(id string, due int64, v int) {
	m.seq++
	m.inst++
	m.pending[id] = modelEntry{due: due, v: v, seq: m.seq, inst: m.inst}
}

func (m *model) reschedule(id string, due int64) bool {
	e, ok := m.pending[id]
	if !ok {
		return false
	}
	m.seq++
	e.due, e.seq = due, m.seq
	m.pending[id] = e
	return true
}

func (m *model) minDue() (int64, bool) {
	var best int64
	found := false
	for _, e := range m.pending {
		if !found || e.due < best {
			best, found = e.due, true
		}
	}
	return best, found
}

// fuzzInput hands out bytes; past the end it returns zeros.
type fuzzInput struct{ b []byte }

func (in *fuzzInput) byte() byte {
	if len(in.b) == 0 {
		return 0
	}
	c := in.b[0]
	in.b = in.b[1:]
	return c
}

func (in *fuzzInput) done() bool { return len(in.b) == 0 }

type handleRef struct {
	h    Handle
	id   string
	inst int
}

// runModel drives a wheel and the model with the operations encoded in data
// and reports the first divergence.
func runModel(data []byte) error {
	in := &fuzzInput{b: data}
	ticks := []time.Duration{1, 2, 7, 16, 1000}
	slotCounts := []int{1, 2, 4, 8, 64, 128}
	opts := Options{Tick: ticks[int(in.byte())%len(ticks)], Slots: slotCounts[int(in.byte())%len(slotCounts)]}
	start := time.Unix(1_000_000, 0)
	w := New[int](start, opts)
	floors := in.byte()
	w.zombieFloor, w.sweepFloor, w.pendMax = int(floors%4), int(floors/4%8), 1+int(floors/32)
	w.sweepChunk = 1 + int(floors%5)
	m := &model{pending: map[string]modelEntry{}}
	var handles []handleRef
	vals := 0
	clock := int64(0) // the caller's clock, ns since start

	// Ids 0–19 are kept in the node, 20–23 are longer than idInline bytes;
	// 20 and 21 share their first idInline bytes.
	idOf := func(c byte) string {
		if c %= 24; c >= 20 {
			return fmt.Sprintf("%0*d", idInline+int(c)%2+1, c/22)
		}
		return fmt.Sprintf("id%d", c)
	}
	dueOf := func(c byte) int64 {
		// Mostly near the clock, some in the past, some far beyond the horizon.
		switch c % 8 {
		case 0:
			return clock - int64(c/8)
		case 1:
			return int64(c/8) * 3000
		case 2:
			return -int64(c) // before start
		default:
			return clock + int64(c/8)*int64(c%5+1)
		}
	}
	at := func(d int64) time.Time { return start.Add(time.Duration(d)) }

	var step func(reentrant bool) error
	step = func(reentrant bool) error {
		op := in.byte()
		switch op % 8 {
		case 0, 1: // Add, or AddAfter from the caller's clock
			id, due := idOf(in.byte()), dueOf(in.byte())
			vals++
			if op%8 == 0 {
				w.Add(id, at(due), vals)
			} else {
				w.AddAfter(id, at(clock), time.Duration(due-clock), vals)
			}
			m.add(id, due, vals)
		case 2: // Remove
			id := idOf(in.byte())
			_, want := m.pending[id]
			delete(m.pending, id)
			if got := w.Remove(id); got != want {
				return fmt.Errorf("Remove(%s) = %v, want %v", id, got, want)
			}
		case 3: // Reschedule
			id, due := idOf(in.byte()), dueOf(in.byte())
			if got, want := w.Reschedule(id, at(due)), m.reschedule(id, due); got != want {
				return fmt.Errorf("Reschedule(%s, %d) = %v, want %v", id, due, got, want)
			}
		case 4: // AddHandle
			id, due := idOf(in.byte()), dueOf(in.byte())
			vals++
			m.add(id, due, vals)
			handles = append(handles, handleRef{h: w.AddHandle(id, at(due), vals), id: id, inst: m.pending[id].inst})
		case 5: // RemoveHandle
			if len(handles) == 0 {
				return nil
			}
			k := int(in.byte()) % len(handles)
			ref := handles[k]
			handles = slices.Delete(handles, k, k+1)
			e, ok := m.pending[ref.id]
			want := ok && e.inst == ref.inst
			if want {
				delete(m.pending, ref.id)
			}
			if got := w.RemoveHandle(ref.h); got != want {
				return fmt.Errorf("RemoveHandle(%s) = %v, want %v", ref.id, got, want)
			}
		case 6: // Get
			id := idOf(in.byte())
			e, want := m.pending[id]
			due, v, ok := w.Get(id)
			if ok != want || ok && (due.Sub(start) != time.Duration(e.due) || v != e.v) {
				return fmt.Errorf("Get(%s) = %v %d %v, want %d %d %v", id, due.Sub(start), v, ok, e.due, e.v, want)
			}
			if w.Len() != len(m.pending) {
				return fmt.Errorf("Len = %d, want %d", w.Len(), len(m.pending))
			}
		case 7: // Advance
			if reentrant {
				return nil
			}
			c := in.byte()
			switch {
			case c < 200:
				clock += int64(c % 40)
			case c < 240:
				clock += int64(c) * 50
			default:
				clock -= int64(c % 16) // a caller whose clock steps back
			}
			return advance(w, m, start, clock, in, func() error { return step(true) })
		}
		return nil
	}

	for !in.done() {
		if err := step(false); err != nil {
			return err
		}
		if err := w.check(); err != nil {
			return fmt.Errorf("invariant: %w", err)
		}
		if w.Len() != len(m.pending) {
			return fmt.Errorf("Len = %d, want %d", w.Len(), len(m.pending))
		}
		next, ok := w.Next()
		minDue, want := m.minDue()
		if ok != want {
			return fmt.Errorf("Next ok = %v, want %v", ok, want)
		}
		if ok {
			n := int64(next.Sub(start))
			if n > minDue {
				return fmt.Errorf("Next = %d, after earliest due %d", n, minDue)
			}
			if minDue > m.now && n <= m.now {
				return fmt.Errorf("Next = %d, not after now %d though nothing is due", n, m.now)
			}
		}
	}
	// Drain: everything fires exactly once at the end of time.
	clock += 1 << 40
	if err := advance(w, m, start, clock, in, nil); err != nil {
		return err
	}
	if w.Len() != 0 {
		return fmt.Errorf("Len = %d after draining", w.Len())
	}
	return w.check()
}

// advance runs one Advance on the wheel and checks every fire against the
// model. reenter, if not nil, runs one more operation from inside each fire.
func advance(w *Wheel[int], m *model, start time.Time, clock int64, in *fuzzInput, reenter func() error) error {
	m.now = max(m.now, clock)
	type exp struct {
		id string
		modelEntry
	}
	var due []exp
	for id, e := range m.pending {
		if e.due <= clock {
			due = append(due, exp{id, e})
		}
	}
	slices.SortFunc(due, func(a, b exp) int { return cmp.Or(cmp.Compare(a.due, b.due), cmp.Compare(a.seq, b.seq)) })
	var failure error
	w.Advance(start.Add(time.Duration(clock)), func(id string, at time.Time, v int) {
		if failure != nil {
			return
		}
		// Skip expected entries that an earlier fire removed or rescheduled.
		for len(due) > 0 {
			if e, ok := m.pending[due[0].id]; ok && e.seq == due[0].seq {
				break
			}
			due = due[1:]
		}
		d := int64(at.Sub(start))
		if len(due) == 0 {
			failure = fmt.Errorf("Advance(%d) fired %s (due %d), nothing expected", clock, id, d)
			return
		}
		want := due[0]
		due = due[1:]
		if id != want.id || d != want.due || v != want.v {
			failure = fmt.Errorf("Advance(%d) fired %s due %d v %d, want %s due %d v %d", clock, id, d, v, want.id, want.due, want.v)
			return
		}
		if d > clock {
			failure = fmt.Errorf("fired %s early: due %d at %d", id, d, clock)
			return
		}
		delete(m.pending, id)
		if reenter != nil && in.byte()%2 == 0 {
			failure = reenter()
		}
	})
	if failure != nil {
		return failure
	}
	for _, e := range due {
		if p, ok := m.pending[e.id]; ok && p.seq == e.seq {
			return fmt.Errorf("Advance(%d) did not fire %s due %d", clock, e.id, e.due)
		}
	}
	return nil
}

func FuzzWheel(f *testing.F) {
	f.Add([]byte{0, 2, 0, 1, 3, 7, 10, 0, 2, 200, 7, 39})
	f.Add([]byte{4, 5, 0, 5, 9, 0, 6, 17, 7, 250, 2, 5, 7, 245, 7, 199})
	f.Add([]byte{1, 0, 4, 3, 1, 4, 3, 9, 5, 0, 7, 30, 0, 4, 16, 7, 255, 7, 30})
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := runModel(data); err != nil {
			t.Fatal(err)
		}
	})
}
