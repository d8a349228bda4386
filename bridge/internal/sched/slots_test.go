package sched

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The index hands out steps in (due, insertion) order, fires and housekeeping apart, keeps one
// entry per id (a put replaces it), and counts what is due without visiting the rest.
func TestSlotsOrderAndReplace(t *testing.T) {
	s := newSlots(time.Second)
	r := rand.New(rand.NewPCG(1, 2))
	want := map[string]int64{}
	for i := range 2000 {
		id := "t" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
		due := r.Int64N(500)
		kind := Fire
		if i%5 == 0 {
			kind = Lease
		}
		s.put(id, due, uint64(i), kind, 0)
		want[id] = due
		if i%7 == 0 {
			s.remove(id)
			delete(want, id)
		}
	}
	if s.len() != len(want) {
		t.Fatalf("len %d, want %d", s.len(), len(want))
	}
	n, earliest := s.countDue(heapFire, 100, Fire)
	wantN, wantEarliest := 0, int64(-1)
	for id, due := range want {
		if e, _ := s.get(id); e.kind == Fire && due <= 100 {
			wantN++
			if wantEarliest < 0 || due < wantEarliest {
				wantEarliest = due
			}
		}
	}
	if n != wantN || earliest != wantEarliest {
		t.Errorf("countDue = %d, %d; want %d, %d", n, earliest, wantN, wantEarliest)
	}
	for h := range 2 {
		var got []int64
		for {
			e, ok := s.peek(h)
			if !ok {
				break
			}
			if p := s.pop(h); p.id != e.id || want[p.id] != p.due {
				t.Fatalf("pop %+v, peeked %+v, want due %d", p, e, want[p.id])
			}
			got = append(got, e.due)
		}
		if !slices.IsSorted(got) {
			t.Errorf("heap %d out of order: %v", h, got)
		}
	}
	if s.len() != 0 {
		t.Errorf("%d left after popping both heaps", s.len())
	}
}

func TestSlotsTiesInInsertionOrder(t *testing.T) {
	s := newSlots(time.Second)
	for _, id := range []string{"a", "b", "c"} {
		s.put(id, 7, 1, Fire, 0)
	}
	s.put("a", 7, 2, Fire, 0) // a replace counts as an insertion
	var got []string
	for range 3 {
		got = append(got, s.pop(heapFire).id)
	}
	if !slices.Equal(got, []string{"b", "c", "a"}) {
		t.Errorf("order %v, want b c a", got)
	}
}
