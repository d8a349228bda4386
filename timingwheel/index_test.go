package timingwheel_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/axbridge/axbridge/timingwheel"
)

func TestIndexTable(t *testing.T) {
	t.Parallel()
	type put struct {
		q   int
		id  string
		due int64
	}
	tests := []struct {
		name   string
		puts   []put
		remove []string
		// popped per queue, in order
		want [2][]string
	}{
		{"empty", nil, nil, [2][]string{}},
		{"deadline order", []put{{0, "c", 30}, {0, "a", 10}, {0, "b", 20}}, nil, [2][]string{{"a", "b", "c"}}},
		{"ties in insertion order", []put{{0, "a", 7}, {0, "b", 7}, {0, "c", 7}}, nil, [2][]string{{"a", "b", "c"}}},
		{"a replace counts as an insertion", []put{{0, "a", 7}, {0, "b", 7}, {0, "c", 7}, {0, "a", 7}}, nil, [2][]string{{"b", "c", "a"}}},
		{"a replace moves the entry to its new time", []put{{0, "a", 1}, {0, "b", 5}, {0, "a", 9}}, nil, [2][]string{{"b", "a"}}},
		{"a replace moves the entry to its new queue", []put{{0, "a", 1}, {0, "b", 5}, {1, "a", 0}}, nil, [2][]string{{"b"}, {"a"}}},
		{"queues apart", []put{{1, "h", 1}, {0, "f", 2}, {1, "i", 0}}, nil, [2][]string{{"f"}, {"i", "h"}}},
		{"remove", []put{{0, "a", 1}, {0, "b", 2}, {1, "c", 3}}, []string{"a", "c", "zz"}, [2][]string{{"b"}}},
		{"negative and extreme times", []put{{0, "max", 1<<63 - 1}, {0, "min", -1 << 63}, {0, "zero", 0}}, nil, [2][]string{{"min", "zero", "max"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			x := timingwheel.New(2)
			for _, p := range tt.puts {
				x.Put(p.q, timingwheel.Entry{ID: p.id, Due: p.due})
			}
			for _, id := range tt.remove {
				x.Remove(id)
			}
			if n := len(tt.want[0]) + len(tt.want[1]); x.Len() != n {
				t.Fatalf("Len %d, want %d", x.Len(), n)
			}
			for q := range 2 {
				var got []string
				for {
					e, ok := x.Pop(q)
					if !ok {
						break
					}
					got = append(got, e.ID)
				}
				if !slices.Equal(got, tt.want[q]) {
					t.Errorf("queue %d: %v, want %v", q, got, tt.want[q])
				}
			}
			if x.Len() != 0 {
				t.Errorf("%d left after popping every queue", x.Len())
			}
		})
	}
}

func TestIndexGetAndRemove(t *testing.T) {
	t.Parallel()
	x := timingwheel.New(3)
	x.Put(2, timingwheel.Entry{ID: "a", Due: 5, Value: 11, Kind: 3})
	if e, ok := x.Get("a"); !ok || e != (timingwheel.Entry{ID: "a", Due: 5, Value: 11, Kind: 3}) {
		t.Fatalf("Get = %+v, %v", e, ok)
	}
	if e, ok := x.Peek(2); !ok || e.ID != "a" {
		t.Fatalf("Peek(2) = %+v, %v; want a", e, ok)
	}
	if due, ok := x.PeekDue(2); !ok || due != 5 {
		t.Fatalf("PeekDue(2) = %d, %v; want 5", due, ok)
	}
	if _, ok := x.Get("b"); ok {
		t.Fatal("Get of an id never put")
	}
	if !x.Remove("a") || x.Remove("a") {
		t.Fatal("Remove: want true once, then false")
	}
	if _, ok := x.Peek(2); ok {
		t.Fatal("Peek of an empty queue")
	}
	if _, ok := x.PeekDue(2); ok {
		t.Fatal("PeekDue of an empty queue")
	}
	if _, ok := x.Pop(2); ok {
		t.Fatal("Pop of an empty queue")
	}
}

// The index keeps its own copy of an id, not the caller's larger string.
func TestIndexCopiesID(t *testing.T) {
	t.Parallel()
	key := []byte("p3.order-42")
	x := timingwheel.New(1)
	x.Put(0, timingwheel.Entry{ID: string(key[3:]), Due: 1})
	copy(key, "XXXXXXXXXXX")
	if e, ok := x.Peek(0); !ok || e.ID != "order-42" {
		t.Fatalf("Peek = %+v", e)
	}
}

func TestIndexCountDue(t *testing.T) {
	t.Parallel()
	x := timingwheel.New(1)
	for i, due := range []int64{50, 10, 30, 20, 40, 5} {
		kind := uint8(1)
		if i == 5 {
			kind = 2 // earliest, but another kind
		}
		x.Put(0, timingwheel.Entry{ID: string(rune('a' + i)), Due: due, Kind: kind})
	}
	for _, tc := range []struct {
		t           int64
		n           int
		earliest    int64
		description string
	}{
		{4, 0, 0, "nothing due"},
		{5, 0, 0, "only the other kind due"},
		{20, 2, 10, "two due"},
		{100, 5, 10, "all due"},
	} {
		if n, earliest := x.CountDue(0, tc.t, 1); n != tc.n || earliest != tc.earliest {
			t.Errorf("%s: CountDue(0, %d, 1) = %d, %d; want %d, %d", tc.description, tc.t, n, earliest, tc.n, tc.earliest)
		}
	}
}

func TestNewRefusesQueueCounts(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, -1, 257} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%d) did not panic", n)
				}
			}()
			timingwheel.New(n)
		}()
	}
	x := timingwheel.New(256)
	x.Put(255, timingwheel.Entry{ID: "last"})
	if e, ok := x.Pop(255); !ok || e.ID != "last" {
		t.Errorf("Pop(255) = %+v, %v", e, ok)
	}
}

// An entry's node is 32 bytes and its heap element 16 (the memory per entry in the package comment
// counts on it), and an id too long for it is refused, not cut.
func TestIndexNodeAndIDLimits(t *testing.T) {
	t.Parallel()
	if timingwheel.NodeSizeForTest != 32 || timingwheel.ElemSizeForTest != 16 {
		t.Errorf("node of %d bytes, element of %d; want 32 and 16", timingwheel.NodeSizeForTest, timingwheel.ElemSizeForTest)
	}
	x := timingwheel.New(1)
	x.Put(0, timingwheel.Entry{ID: strings.Repeat("a", 65535), Due: 1})
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Put of an id of 65,536 bytes did not panic")
			}
		}()
		x.Put(0, timingwheel.Entry{ID: strings.Repeat("b", 65536), Due: 2})
	}()
	if e, ok := x.Pop(0); !ok || len(e.ID) != 65535 || x.Len() != 0 {
		t.Errorf("Pop = %d bytes of id, %v; %d left", len(e.ID), ok, x.Len())
	}
}

// PeekDue reads the earliest due time without allocating: the bridge loop calls it several times a
// turn.
func TestIndexPeekDueAllocs(t *testing.T) {
	x := timingwheel.New(2)
	x.Put(1, timingwheel.Entry{ID: "order-42", Due: 7})
	x.Put(1, timingwheel.Entry{ID: "order-43", Due: 3})
	if a := testing.AllocsPerRun(100, func() {
		if due, ok := x.PeekDue(1); !ok || due != 3 {
			t.Fatalf("PeekDue(1) = %d, %v; want 3", due, ok)
		}
	}); a != 0 {
		t.Errorf("PeekDue allocates %v times a call, want 0", a)
	}
}

// Scan sees every entry once, with its tag, whatever queue, wheel slot or heap it is in, and
// none that was removed, popped or replaced.
func TestIndexScanAndTag(t *testing.T) {
	t.Parallel()
	x := timingwheel.NewWheel(2, 100)
	x.Advance(0, func(timingwheel.Entry) {})
	want := map[string]timingwheel.Entry{}
	for i := range 3000 {
		e := timingwheel.Entry{ID: "t" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + strconv.Itoa(i), Due: int64(i*7%5000 - 50), Value: uint64(i), Kind: uint8(i % 3), Tag: uint32(i * 31)}
		x.Put(i%2, e)
		want[e.ID] = e
	}
	for i := 0; i < 3000; i += 5 {
		id := "t" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + strconv.Itoa(i)
		if i%10 == 0 {
			x.Remove(id)
			delete(want, id)
		} else {
			e := want[id]
			e.Tag, e.Due = 7, e.Due+1000
			x.Put(0, e)
			want[id] = e
		}
	}
	for range 40 {
		e, _ := x.Pop(1)
		delete(want, e.ID)
	}
	got := map[string]timingwheel.Entry{}
	x.Scan(func(id []byte, e timingwheel.Entry) bool {
		if _, dup := got[string(id)]; dup {
			t.Errorf("%s scanned twice", id)
		}
		e.ID = string(id)
		got[e.ID] = e
		return true
	})
	if len(got) != len(want) || len(got) != x.Len() {
		t.Fatalf("scanned %d entries, want %d (Len %d)", len(got), len(want), x.Len())
	}
	for id, w := range want {
		if g := got[id]; g != w {
			t.Fatalf("%s: scanned %+v, want %+v", id, g, w)
		}
		if g, _ := x.Get(id); g != w {
			t.Fatalf("%s: Get %+v, want %+v", id, g, w)
		}
	}
	n := 0
	x.Scan(func([]byte, timingwheel.Entry) bool { n++; return n < 10 })
	if n != 10 {
		t.Errorf("scan went on after false: %d calls", n)
	}
}
