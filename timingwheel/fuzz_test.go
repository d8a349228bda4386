package timingwheel_test

import (
	"cmp"
	"slices"
	"strconv"
	"testing"

	"github.com/axbridge/axbridge/timingwheel"
)

// refEntry is an entry of the model: a naive list, searched in full for every answer.
type refEntry struct {
	e     timingwheel.Entry
	queue int
	seq   int // insertion order
}

type model struct{ entries []refEntry }

func (m *model) find(id string) int {
	return slices.IndexFunc(m.entries, func(r refEntry) bool { return r.e.ID == id })
}

// earliest is the index in m.entries of queue q's earliest entry by (due, insertion), or -1.
func (m *model) earliest(q int) int {
	best := -1
	for i, r := range m.entries {
		if r.queue != q {
			continue
		}
		if best < 0 || cmp.Or(cmp.Compare(r.e.Due, m.entries[best].e.Due), cmp.Compare(r.seq, m.entries[best].seq)) < 0 {
			best = i
		}
	}
	return best
}

// FuzzIndex drives an Index and the model with the same operations (put, which replaces; remove;
// time passing, after which every due entry is popped) and checks every answer: each entry put
// fires exactly once unless it was replaced or removed first, never before its due time, never
// later than the first pop at or after it, in (due, insertion) order per queue; Get, Len and
// CountDue agree with the model throughout. Each input runs twice: on an index from New, and on
// one whose ids share a few hashes and whose id arena is compacted at every chance.
func FuzzIndex(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{0x10, 0x11, 0x12, 0x40, 0x50, 0x80, 0xc5, 0x13, 0x41, 0xff})
	f.Add([]byte("put the same id many times, then remove it, then let time pass"))
	f.Fuzz(func(t *testing.T, ops []byte) {
		const queues = 3
		t.Run("maphash", func(t *testing.T) { fuzzIndex(t, timingwheel.New(queues), queues, ops) })
		t.Run("colliding", func(t *testing.T) { fuzzIndex(t, timingwheel.NewCollidingForTest(queues, 3), queues, ops) })
	})
}

func fuzzIndex(t *testing.T, x *timingwheel.Index, queues int, ops []byte) {
	{
		const ids = 12
		var m model
		var now int64
		seq := 0
		live := map[uint64]bool{}  // tokens (Value) of entries put and not yet replaced or removed
		fired := map[uint64]bool{} // tokens popped
		pop := func() {
			for q := range queues {
				for {
					e, ok := x.Peek(q)
					if due, dok := x.PeekDue(q); dok != ok || due != e.Due {
						t.Fatalf("queue %d: PeekDue = %d, %v; Peek = %+v, %v", q, due, dok, e, ok)
					}
					if !ok || e.Due > now {
						break
					}
					got, _ := x.Pop(q)
					i := m.earliest(q)
					if i < 0 || got != e || got != m.entries[i].e {
						t.Fatalf("queue %d at %d: popped %+v (peeked %+v), model's earliest %d of %+v", q, now, got, e, i, m.entries)
					}
					if fired[got.Value] || !live[got.Value] {
						t.Fatalf("entry %+v fired twice or after it was replaced or removed", got)
					}
					fired[got.Value] = true
					delete(live, got.Value)
					m.entries = slices.Delete(m.entries, i, i+1)
				}
				if i := m.earliest(q); i >= 0 && m.entries[i].e.Due <= now {
					t.Fatalf("queue %d at %d: %+v is due but was not handed out", q, now, m.entries[i].e)
				}
			}
		}
		for k, op := range ops {
			id := "id-" + strconv.Itoa(int(op)%ids)
			switch op >> 6 {
			case 0, 1: // put
				q := int(op>>4) % queues
				e := timingwheel.Entry{ID: id, Due: now + int64(k%7)*int64(op&0x0f) - 3, Value: uint64(k + 1), Kind: op & 1}
				if i := m.find(id); i >= 0 {
					delete(live, m.entries[i].e.Value)
					m.entries = slices.Delete(m.entries, i, i+1)
				}
				seq++
				m.entries = append(m.entries, refEntry{e: e, queue: q, seq: seq})
				live[e.Value] = true
				x.Put(q, e)
			case 2: // remove
				i := m.find(id)
				if got := x.Remove(id); got != (i >= 0) {
					t.Fatalf("Remove(%s) = %v, model has it: %v", id, got, i >= 0)
				}
				if i >= 0 {
					delete(live, m.entries[i].e.Value)
					m.entries = slices.Delete(m.entries, i, i+1)
				}
			case 3: // time passes
				now += int64(op & 0x1f)
				pop()
			}
			if x.Len() != len(m.entries) {
				t.Fatalf("Len %d, model %d", x.Len(), len(m.entries))
			}
			i := m.find(id)
			if got, ok := x.Get(id); ok != (i >= 0) || ok && got != m.entries[i].e {
				t.Fatalf("Get(%s) = %+v, %v; model %+v", id, got, ok, m.entries)
			}
			for q := range queues {
				n, earliest := x.CountDue(q, now+5, 1)
				wantN, wantEarliest := 0, int64(0)
				for _, r := range m.entries {
					if r.queue == q && r.e.Kind == 1 && r.e.Due <= now+5 {
						if wantN == 0 || r.e.Due < wantEarliest {
							wantEarliest = r.e.Due
						}
						wantN++
					}
				}
				if n != wantN || earliest != wantEarliest {
					t.Fatalf("CountDue(%d, %d) = %d, %d; model %d, %d", q, now+5, n, earliest, wantN, wantEarliest)
				}
			}
		}
		now += 1 << 20
		pop()
		if x.Len() != 0 || len(live) != 0 {
			t.Fatalf("after every due time: %d entries indexed, %d never fired", x.Len(), len(live))
		}
	}
}
