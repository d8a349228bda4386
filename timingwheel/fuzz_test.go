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
	seq   int  // insertion order
	far   bool // in the far heap: Advance reports it when it is due before cur+span
}

// model is what an Index should answer. With span 0 it models New: no wheel, Advance does nothing.
type model struct {
	entries []refEntry
	span    int64
	cur     int64
	started bool
}

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

// inFar is whether an entry put now, due at due, goes to the far heap.
func (m *model) inFar(due int64) bool {
	return m.span > 0 && (!m.started || due >= m.cur+m.span)
}

// advance moves the model's wheel to now and returns the entries that leave the far heaps.
func (m *model) advance(now int64) map[uint64]timingwheel.Entry {
	entering := map[uint64]timingwheel.Entry{}
	if m.span == 0 {
		return entering
	}
	if !m.started || now > m.cur {
		m.started, m.cur = true, now
	}
	for i := range m.entries {
		if r := &m.entries[i]; r.far && r.e.Due < m.cur+m.span {
			r.far = false
			entering[r.e.Value] = r.e
		}
	}
	return entering
}

// countDue is CountDue of the model.
func (m *model) countDue(q int, t int64, kind uint8) (n int, earliest int64) {
	for _, r := range m.entries {
		if r.queue == q && r.e.Kind == kind && r.e.Due <= t {
			if n == 0 || r.e.Due < earliest {
				earliest = r.e.Due
			}
			n++
		}
	}
	return n, earliest
}

// FuzzIndex drives an Index and the model with the same operations (put, which replaces; remove;
// Advance, forward by little or by more than the span, or back; time passing, after which every
// due entry is popped, one at a time or a due time's batch at a time) and checks every answer:
// each entry put fires exactly once unless it was replaced or removed first, never before its due
// time, never later than the first pop at or after it, in (due, insertion) order per queue; Get,
// Len and CountDue agree with the model throughout; Advance reports exactly the entries that
// leave the far heaps. Each input runs on indexes from New and from NewWheel of a few spans, some
// with ids that share a few hashes and an id arena compacted at every chance.
func FuzzIndex(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{0x10, 0x11, 0x12, 0x40, 0x50, 0x80, 0xc5, 0x13, 0x41, 0xff})
	f.Add([]byte("put the same id many times, then remove it, then let time pass"))
	f.Add([]byte{0x21, 0x32, 0xc1, 0x05, 0x16, 0xe7, 0x27, 0xec, 0x03, 0xf3, 0x34, 0xf9, 0xc2, 0xfe})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const queues = 3
		for _, c := range []struct {
			name    string
			span    int64
			collide bool
		}{{"heap", 0, false}, {"heap-colliding", 0, true}, {"wheel-1", 1, false}, {"wheel-5-colliding", 5, true}, {"wheel-64", 64, false}} {
			t.Run(c.name, func(t *testing.T) {
				x := timingwheel.New(queues)
				if c.span > 0 {
					x = timingwheel.NewWheel(queues, c.span)
				}
				if c.collide {
					timingwheel.CollideForTest(x, 3)
				}
				r := &fuzzRun{t: t, x: x, queues: queues, m: model{span: c.span}, live: map[uint64]bool{}, fired: map[uint64]bool{}}
				r.run(ops)
			})
		}
	})
}

// fuzzRun is one run of FuzzIndex.
type fuzzRun struct {
	t      *testing.T
	x      *timingwheel.Index
	queues int
	m      model
	now    int64
	seq    int
	live   map[uint64]bool // tokens (Value) of entries put and not yet replaced or removed
	fired  map[uint64]bool // tokens popped
}

func (r *fuzzRun) run(ops []byte) {
	for k, op := range ops {
		id := "id-" + strconv.Itoa(int(op)%12)
		switch op >> 6 {
		case 0, 1:
			r.put(int(op>>4)%r.queues, timingwheel.Entry{ID: id, Due: r.now + int64(k%7)*int64(op&0x0f) - 3, Value: uint64(k + 1), Kind: op & 1})
		case 2:
			r.remove(id)
		case 3:
			r.timePasses(op)
		}
		r.check(id, r.now+int64(op&0x3f)-8)
	}
	r.now += 1 << 20
	r.advance(r.now)
	r.popDue(false)
	if r.x.Len() != 0 || len(r.live) != 0 {
		r.t.Fatalf("after every due time: %d entries indexed, %d never fired", r.x.Len(), len(r.live))
	}
}

// timePasses runs op, one of 64: time passes by up to 31 and Advance follows it; or time passes
// by over a span; or the index is advanced back, or ahead of the time; or time passes by up to 7
// without an Advance. Then every due entry is popped, a due time at a time for some ops.
func (r *fuzzRun) timePasses(op byte) {
	switch {
	case op&0x20 == 0:
		r.now += int64(op & 0x1f)
		r.advance(r.now)
	case op&0x18 == 0x00:
		r.now += max(r.m.span, 1)*int64(1+op&3) + int64(op&4)
		r.advance(r.now)
	case op&0x18 == 0x08:
		r.advance(r.now - 1 - int64(op&7))
	case op&0x18 == 0x10:
		r.advance(r.now + int64(op&7))
	default:
		r.now += int64(op & 7)
	}
	r.popDue(op&1 == 1)
}

func (r *fuzzRun) put(q int, e timingwheel.Entry) {
	if i := r.m.find(e.ID); i >= 0 {
		delete(r.live, r.m.entries[i].e.Value)
		r.m.entries = slices.Delete(r.m.entries, i, i+1)
	}
	r.seq++
	r.m.entries = append(r.m.entries, refEntry{e: e, queue: q, seq: r.seq, far: r.m.inFar(e.Due)})
	r.live[e.Value] = true
	r.x.Put(q, e)
}

func (r *fuzzRun) remove(id string) {
	i := r.m.find(id)
	if got := r.x.Remove(id); got != (i >= 0) {
		r.t.Fatalf("Remove(%s) = %v, model has it: %v", id, got, i >= 0)
	}
	if i >= 0 {
		delete(r.live, r.m.entries[i].e.Value)
		r.m.entries = slices.Delete(r.m.entries, i, i+1)
	}
}

// advance calls Advance(to) and checks that it reports exactly the entries leaving the far heaps.
func (r *fuzzRun) advance(to int64) {
	want := r.m.advance(to)
	got := map[uint64]timingwheel.Entry{}
	r.x.Advance(to, func(e timingwheel.Entry) {
		if _, ok := got[e.Value]; ok {
			r.t.Fatalf("Advance(%d) reported %+v twice", to, e)
		}
		got[e.Value] = e
	})
	if len(got) != len(want) {
		r.t.Fatalf("Advance(%d) reported %v, want %v", to, got, want)
	}
	for v, e := range want {
		if got[v] != e {
			r.t.Fatalf("Advance(%d) reported %v, want %v", to, got, want)
		}
	}
}

// popDue pops every entry due by now, one at a time or with PopSlot, checking each against the
// model.
func (r *fuzzRun) popDue(batch bool) {
	for q := range r.queues {
		for {
			e, ok := r.x.Peek(q)
			if due, dok := r.x.PeekDue(q); dok != ok || due != e.Due {
				r.t.Fatalf("queue %d: PeekDue = %d, %v; Peek = %+v, %v", q, due, dok, e, ok)
			}
			if !ok || e.Due > r.now {
				break
			}
			if !batch {
				got, _ := r.x.Pop(q)
				r.popped(q, got, e)
				continue
			}
			n := r.x.PopSlot(q, 3, func(got timingwheel.Entry) { r.popped(q, got, e) })
			if i := r.m.earliest(q); n < 1 || n < 3 && i >= 0 && r.m.entries[i].e.Due == e.Due {
				r.t.Fatalf("queue %d: PopSlot popped %d of the entries due at %d, leaving %+v", q, n, e.Due, r.m.entries)
			}
		}
		if i := r.m.earliest(q); i >= 0 && r.m.entries[i].e.Due <= r.now {
			r.t.Fatalf("queue %d at %d: %+v is due but was not handed out", q, r.now, r.m.entries[i].e)
		}
	}
}

// popped checks an entry popped from queue q, the first due one when peeked at due.
func (r *fuzzRun) popped(q int, got, peeked timingwheel.Entry) {
	i := r.m.earliest(q)
	if i < 0 || got != r.m.entries[i].e || got.Due != peeked.Due {
		r.t.Fatalf("queue %d at %d: popped %+v (peeked %+v), model's earliest %d of %+v", q, r.now, got, peeked, i, r.m.entries)
	}
	if r.fired[got.Value] || !r.live[got.Value] {
		r.t.Fatalf("entry %+v fired twice or after it was replaced or removed", got)
	}
	r.fired[got.Value] = true
	delete(r.live, got.Value)
	r.m.entries = slices.Delete(r.m.entries, i, i+1)
}

// check compares Len, Get(id) and CountDue at t with the model.
func (r *fuzzRun) check(id string, t int64) {
	if r.x.Len() != len(r.m.entries) {
		r.t.Fatalf("Len %d, model %d", r.x.Len(), len(r.m.entries))
	}
	i := r.m.find(id)
	if got, ok := r.x.Get(id); ok != (i >= 0) || ok && got != r.m.entries[i].e {
		r.t.Fatalf("Get(%s) = %+v, %v; model %+v", id, got, ok, r.m.entries)
	}
	for q := range r.queues {
		for _, kind := range []uint8{0, 1} {
			n, earliest := r.x.CountDue(q, t, kind)
			if wantN, wantEarliest := r.m.countDue(q, t, kind); n != wantN || earliest != wantEarliest {
				r.t.Fatalf("CountDue(%d, %d, %d) = %d, %d; model %d, %d", q, t, kind, n, earliest, wantN, wantEarliest)
			}
		}
	}
}
