package bench

import (
	"container/heap"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/axbridge/axbridge/timingwheel"
	"github.com/zeromicro/go-zero/core/collection"
)

const (
	pending = 1_000_000
	extra   = 200_000 // ids beyond the pre-filled ones, for schedule runs
)

// ids are allocated once so that their bytes are not counted per entry.
var ids = func() []string {
	out := make([]string, pending+extra)
	for i := range out {
		out[i] = "task-" + strconv.Itoa(i) + "-0123456789"
	}
	return out
}()

type dist struct {
	name  string
	delay func(r *rand.Rand) time.Duration
}

var dists = []dist{
	{"fixed30s", func(*rand.Rand) time.Duration { return 30 * time.Second }},
	{"uniform1s-5m", func(r *rand.Rand) time.Duration {
		return time.Second + time.Duration(r.Int64N(int64(5*time.Minute-time.Second)))
	}},
}

// scheduler is what every implementation offers the benchmarks. k indexes ids.
type scheduler interface {
	add(k int, delay time.Duration)
	cancel(k int) // by id
	close()
}

// handleCanceler cancels by a handle kept at add time.
type handleCanceler interface {
	cancelHandle(k int)
}

// onFire counts fires of background entries that fall due during a run.
var onFire atomic.Int64

// ownerCanceler cancels the way an owner does: prepare copies what the
// caller holds for each victim (a freshly built id string, or the handle)
// into a small batch, untimed; cancelPrepared(j) cancels the j-th.
type ownerCanceler interface {
	prepare(victims []int)
	cancelPrepared(j int)
}

// --- timingwheel ---

type wheelSched struct {
	w       *timingwheel.Wheel[uint32]
	handles []timingwheel.Handle
	batch   []string
}

func newWheel() *wheelSched {
	return &wheelSched{
		w:       timingwheel.New[uint32](time.Now(), timingwheel.Options{}),
		handles: make([]timingwheel.Handle, pending+extra),
	}
}

func (s *wheelSched) add(k int, d time.Duration) {
	s.handles[k] = s.w.AddHandle(ids[k], time.Now().Add(d), uint32(k))
}
func (s *wheelSched) cancel(k int)       { s.w.Remove(ids[k]) }
func (s *wheelSched) cancelHandle(k int) { s.w.RemoveHandle(s.handles[k]) }
func (s *wheelSched) close()             {}

func (s *wheelSched) prepare(victims []int) {
	s.batch = s.batch[:0]
	for _, k := range victims {
		s.batch = append(s.batch, strings.Clone(ids[k]))
	}
}
func (s *wheelSched) cancelPrepared(j int) { s.w.Remove(s.batch[j]) }

// --- time.AfterFunc ---

type afterFuncSched struct {
	timers []*time.Timer
	batch  []*time.Timer
	byID   map[string]*time.Timer // only for cancel by id
}

func newAfterFunc(withIndex bool) *afterFuncSched {
	s := &afterFuncSched{timers: make([]*time.Timer, pending+extra)}
	if withIndex {
		s.byID = make(map[string]*time.Timer)
	}
	return s
}

// start starts the timer of id k, due d from now, and returns it.
func (s *afterFuncSched) start(k int, d time.Duration) *time.Timer {
	return time.AfterFunc(d, func() { onFire.Add(int64(k) & 1) })
}

func (s *afterFuncSched) add(k int, d time.Duration) {
	t := s.start(k, d)
	s.timers[k] = t
	if s.byID != nil {
		s.byID[ids[k]] = t
	}
}

func (s *afterFuncSched) cancel(k int) {
	if t, ok := s.byID[ids[k]]; ok {
		t.Stop()
		delete(s.byID, ids[k])
	}
}

func (s *afterFuncSched) cancelHandle(k int) { s.timers[k].Stop() }

func (s *afterFuncSched) prepare(victims []int) {
	s.batch = s.batch[:0]
	for _, k := range victims {
		s.batch = append(s.batch, s.timers[k])
	}
}
func (s *afterFuncSched) cancelPrepared(j int) { s.batch[j].Stop() }

func (s *afterFuncSched) close() {
	for _, t := range s.timers {
		if t != nil {
			t.Stop()
		}
	}
}

// --- container/heap with a map id index ---

type heapItem struct {
	id    string
	due   int64
	index int
	v     uint32
}

type itemHeap []*heapItem

func (h itemHeap) Len() int           { return len(h) }
func (h itemHeap) Less(i, j int) bool { return h[i].due < h[j].due }
func (h itemHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *itemHeap) Push(x any) {
	it := x.(*heapItem)
	it.index = len(*h)
	*h = append(*h, it)
}
func (h *itemHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}

type heapSched struct {
	start time.Time
	h     itemHeap
	byID  map[string]*heapItem
}

func newHeap() *heapSched {
	return &heapSched{start: time.Now(), byID: make(map[string]*heapItem)}
}

func (s *heapSched) add(k int, d time.Duration) { s.addAt(k, time.Now().Add(d)) }

func (s *heapSched) addAt(k int, at time.Time) {
	due := int64(at.Sub(s.start))
	if it, ok := s.byID[ids[k]]; ok {
		it.due = due
		heap.Fix(&s.h, it.index)
		return
	}
	it := &heapItem{id: ids[k], due: due, v: uint32(k)}
	heap.Push(&s.h, it)
	s.byID[ids[k]] = it
}

func (s *heapSched) cancel(k int) {
	if it, ok := s.byID[ids[k]]; ok {
		heap.Remove(&s.h, it.index)
		delete(s.byID, ids[k])
	}
}

func (s *heapSched) close() {}

func (s *heapSched) next() (time.Time, bool) {
	if len(s.h) == 0 {
		return time.Time{}, false
	}
	return s.start.Add(time.Duration(s.h[0].due)), true
}

func (s *heapSched) advance(now time.Time, fire func(id string, due time.Time, v uint32)) {
	n := int64(now.Sub(s.start))
	for len(s.h) > 0 && s.h[0].due <= n {
		it := heap.Pop(&s.h).(*heapItem)
		delete(s.byID, it.id)
		fire(it.id, s.start.Add(time.Duration(it.due)), it.v)
	}
}

// --- go-zero collection.TimingWheel ---

type goZeroSched struct {
	tw *collection.TimingWheel
}

// newGoZero uses the same slot width and count as our wheel. Every operation
// is a send on an unbuffered channel to the wheel's own goroutine.
func newGoZero(execute func(key, value any)) *goZeroSched {
	if execute == nil {
		execute = func(key, value any) { onFire.Add(1) }
	}
	tw, err := collection.NewTimingWheel(time.Millisecond, 4096, execute)
	if err != nil {
		panic(err)
	}
	return &goZeroSched{tw: tw}
}

func (s *goZeroSched) add(k int, d time.Duration) { _ = s.tw.SetTimer(ids[k], uint32(k), d) }
func (s *goZeroSched) cancel(k int)               { _ = s.tw.RemoveTimer(ids[k]) }
func (s *goZeroSched) close()                     { s.tw.Stop() }

// wheelByID keeps no handles: what an id-only caller holds.
type wheelByID struct{ w *timingwheel.Wheel[uint32] }

func (s *wheelByID) add(k int, d time.Duration) { s.addAfter(k, time.Now(), d) }
func (s *wheelByID) addAfter(k int, now time.Time, d time.Duration) {
	s.w.AddAfter(ids[k], now, d, uint32(k))
}
func (s *wheelByID) cancel(k int) { s.w.Remove(ids[k]) }
func (s *wheelByID) close()       {}

var impls = []struct {
	name string
	make func() scheduler
}{
	{"wheel", func() scheduler {
		return &wheelByID{timingwheel.New[uint32](time.Now(), timingwheel.Options{})}
	}},
	{"afterfunc", func() scheduler { return newAfterFunc(false) }},
	{"heap", func() scheduler { return newHeap() }},
	{"gozero", func() scheduler { return newGoZero(nil) }},
}

func fill(s scheduler, d dist, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	for k := range pending {
		s.add(k, d.delay(r))
	}
}
