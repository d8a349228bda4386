package timingwheel

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"time"
	"unsafe"
)

// Options configures a Wheel. The zero value gives the defaults.
type Options struct {
	Tick  time.Duration // slot width; default 1ms
	Slots int           // slots per wheel level, power of two; default 4096 (level 0 spans 2×Slots ticks, ~8s at 1ms)
}

func (o Options) withDefaults() Options {
	o.Tick = cmp.Or(o.Tick, time.Millisecond)
	o.Slots = cmp.Or(o.Slots, 4096)
	return o
}

func (o Options) validate() error {
	if o.Tick <= 0 {
		return fmt.Errorf("timingwheel: Tick %v must be positive", o.Tick)
	}
	if o.Slots <= 0 || o.Slots&(o.Slots-1) != 0 || o.Slots > 1<<24 {
		return fmt.Errorf("timingwheel: Slots %d must be a power of two up to 1<<24", o.Slots)
	}
	return nil
}

// Wheel schedules string ids with values of type V. It is not safe for
// concurrent use: one goroutine owns it.
type Wheel[V any] struct {
	start time.Time
	tick  int64
	mask  int64 // Slots-1: level-1 slot mask
	mask0 int64 // 2*Slots-1: level-0 slot mask
	l0    int   // 2*Slots level-0 slots

	shift uint // log2(Slots): a level-1 slot spans 1<<shift ticks
	slots int  // Slots

	slab  slab[V]
	index index

	// heads[0:2*Slots] are the level-0 slot lists (one tick each, two
	// level-1 blocks), heads[2*Slots:3*Slots] the level-1 slot lists (Slots
	// ticks each) and heads[3*Slots] the overdue list of entries due at or
	// before now. Lists are doubly linked through node.next and node.prev,
	// newest first; the head's prev and the last node's next name the list.
	heads    []int32
	tails    []int32     // the last node of each list, nilIdx if empty
	unsorted []bool      // list not in descending (due, seq) order from its head
	occupied [2][]uint64 // bit per slot of each level: list not empty
	heap     []int32     // entries beyond the level-1 horizon
	zombies  int         // removed entries still in the heap
	// listZombies counts removed entries still linked in a list; see drop.
	listZombies int
	// zombieFloor is the zombie count below which the heap is never
	// compacted, sweepFloor the one below which lists are never swept; tests
	// lower them.
	zombieFloor int
	sweepFloor  int
	sweepChunk  int   // nodes one sweep step visits; tests lower it
	sweepAt     int32 // next node of a sweep in progress, -1 if none
	pendMax     int   // most entries Add queues, normally pendMax; tests lower it

	now        int64 // highest time passed to Advance, ns since start
	cur        int64 // tick of the slot Advance resumes at
	overdueMin int64 // lower bound of due times in the overdue list
	seq        uint32

	advancing bool
	batch     []fireEntry
	arena     *arenaBlock // backs the id strings Advance hands to fire
	arenaOff  int         // bytes of arena in use
	pend      []pendEntry // added entries not yet indexed; see Add
	firedDue  int64       // the due time of the last fire, as firedAt
	firedAt   time.Time
	lastNow   time.Time // the now of the last AddAfter, and rel(lastNow)
	lastRel   int64
}

type fireEntry struct {
	due int64
	seq uint32
	idx int32
}

// Handle refers to one pending entry without an id lookup. A handle to an
// entry that fired or was removed is stale: RemoveHandle returns false. The
// zero Handle is never valid.
type Handle struct {
	idx int32
	gen uint32
}

// New returns an empty wheel whose time origin is start (the owner's
// time.Now()). It panics if opts is invalid: Tick must be positive and Slots a
// power of two.
func New[V any](start time.Time, opts Options) *Wheel[V] {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		panic(err)
	}
	w := &Wheel[V]{
		start:       start,
		tick:        int64(opts.Tick),
		mask:        int64(opts.Slots - 1),
		mask0:       int64(2*opts.Slots - 1),
		l0:          2 * opts.Slots,
		shift:       uint(bits.TrailingZeros(uint(opts.Slots))),
		slots:       opts.Slots,
		heads:       make([]int32, 3*opts.Slots+1),
		overdueMin:  math.MaxInt64,
		zombieFloor: 256,
		sweepFloor:  16384,
		sweepChunk:  1024,
		sweepAt:     -1,
		pendMax:     pendMax,
	}
	w.occupied[0] = make([]uint64, (w.l0+63)/64)
	w.occupied[1] = make([]uint64, (opts.Slots+63)/64)
	w.tails = make([]int32, len(w.heads))
	w.unsorted = make([]bool, len(w.heads))
	for i := range w.heads {
		w.heads[i], w.tails[i] = nilIdx, nilIdx
	}
	w.slab.free = nilIdx
	w.firedDue, w.firedAt = 0, start
	w.lastNow = start
	w.index.init()
	return w
}

func (w *Wheel[V]) rel(t time.Time) int64 { return int64(t.Sub(w.start)) }

func (w *Wheel[V]) abs(d int64) time.Time { return w.start.Add(time.Duration(d)) }

// tickOf is floor(d / tick).
func (w *Wheel[V]) tickOf(d int64) int64 {
	t := d / w.tick
	if d < 0 && t*w.tick != d {
		t--
	}
	return t
}

func (w *Wheel[V]) overdueList() int { return len(w.heads) - 1 }

// Len returns the number of pending entries.
func (w *Wheel[V]) Len() int {
	w.flush()
	return w.index.count
}

// Add schedules id at due with value v. If id is already pending, that entry
// is replaced (its handles go stale).
//
// The wheel keeps its own copy of id. Indexing the id is deferred: Add links
// the entry where it fires and queues it; the queue is indexed in one pass
// when it fills or before anything reads the index (Remove, Get, Reschedule,
// RemoveHandle, Len, Next, Advance). Add prefetches the index position the
// entry will take, so by the time its batch is indexed the position is in
// cache: the cache misses of many Adds overlap instead of costing one full
// memory latency each.
func (w *Wheel[V]) Add(id string, due time.Time, v V) {
	w.add(id, w.rel(due), v)
}

// AddAfter schedules id at d after now, as Add(id, now.Add(d), v) does, for
// an owner that holds the current time and a delay. It spares the owner the
// time.Time arithmetic of now.Add, and converts now once for the calls that
// share it: all in cache (BenchmarkAdd) an Add cost 41 ns this way against
// 49 with now.Add, and 72-77 against 81-88 with 1M pending (the bench
// module's Paired op=steady). A due time beyond the range of int64
// nanoseconds from the wheel's start is clamped to it, as with Add.
func (w *Wheel[V]) AddAfter(id string, now time.Time, d time.Duration, v V) {
	w.add(id, w.after(now, d), v)
}

// after is rel(now.Add(d)), saturating at the ends of int64 as time.Time.Sub
// does.
func (w *Wheel[V]) after(now time.Time, d time.Duration) int64 {
	if now != w.lastNow {
		w.lastNow, w.lastRel = now, w.rel(now)
	}
	r := w.lastRel
	due := r + int64(d)
	if d > 0 && due < r {
		return math.MaxInt64
	}
	if d < 0 && due > r {
		return math.MinInt64
	}
	return due
}

// AddHandle is Add returning a handle to the entry, for RemoveHandle.
func (w *Wheel[V]) AddHandle(id string, due time.Time, v V) Handle {
	i := w.add(id, w.rel(due), v)
	return Handle{idx: i, gen: w.slab.at(i).gen}
}

// pendEntry is a queued entry: its node and its id's hash.
type pendEntry struct {
	i int32
	h uint32
}

// unindexed is node.pos of an entry queued in pend.
const unindexed = ^uint32(0)

// pendMax is the most entries Add queues before indexing them.
const pendMax = 32

func (w *Wheel[V]) add(id string, due int64, v V) int32 {
	// Add makes no call in its common case: pop, setID, wheelList and
	// pushFront inline, and a wheel slot whose list is not empty is linked
	// here rather than by place (too large to inline). Each call cost a few
	// ns of an Add of about 100.
	i, n := w.slab.pop()
	if n == nil {
		i, n = w.slab.fresh()
	}
	n.v = v
	w.slab.setID(i, n, id)
	n.due = due
	n.pos = unindexed
	w.seq++
	n.seq = w.seq
	if list := w.wheelList(due); list >= 0 && w.heads[list] != nilIdx {
		n.prev = listHead(list) // here, not in pushFront: keeps it inlinable
		w.pushFront(list, i, n, w.heads[list])
	} else {
		w.put(i, n)
	}
	h := w.index.hash(id)
	w.index.prefetchHome(h)
	if x := &w.index; x.moving() {
		// flush looks an id up in the old table too (findOld) when the current
		// one does not hold it.
		p := h & x.old.mask
		prefetch2(unsafe.Pointer(&x.old.tags[p]), unsafe.Pointer(&x.old.nodes[p]))
	}
	w.pend = append(w.pend, pendEntry{i, h})
	if len(w.pend) >= w.pendMax || w.advancing {
		// Inside fire, an entry this Add replaces must not fire after it.
		w.flush()
	}
	return i
}

// flush indexes the entries Add queued, in order: one whose id is already
// pending replaces that entry, which is dropped. While entries move out of an
// old index table, each indexed entry moves a few more (moveStep). Small
// enough to inline, so a call with nothing queued costs no call.
func (w *Wheel[V]) flush() {
	if len(w.pend) != 0 {
		w.flushPend()
	}
}

// flushPend is flush's work, for a non-empty pend.
func (w *Wheel[V]) flushPend() {
	x := &w.index
	for k := 0; k < len(w.pend); k++ {
		if !x.moving() {
			if k += w.flushFast(w.pend[k:]); k == len(w.pend) {
				break
			}
		}
		w.flushOne(w.pend[k])
	}
	if x.moving() {
		moveStep(x, &w.slab, len(w.pend)*x.step)
	}
	w.pend = w.pend[:0]
}

// flushFast indexes queued entries from the start of pend, as long as each
// one's answer is in the eight tags from its home position: there is an empty
// position among them and no tag of the entry's hash before it, so its id is
// not pending, and it takes the first tombstone before that empty position,
// else the empty one. It returns how many it indexed; it stops at the first
// entry that needs a full probe (flushOne), and after the one that fills the
// table. The caller makes sure no old table is in play.
//
// This is how nearly every queued entry is indexed when the table is at most
// three quarters full. Written out, with the table's fields in locals, it
// measured 26-29 ns per entry inside a churn of Adds and cancels, against 33
// for the general probe (findNew) that it spares.
func (w *Wheel[V]) flushFast(pend []pendEntry) int {
	x := &w.index
	tags, nodes, mask, bit := x.tags, x.nodes, x.mask, x.bit
	used, count := x.used, x.count
	k := 0
	for ; k < len(pend); k++ {
		e := pend[k]
		pos := e.h & mask
		if int(pos)+8 > len(tags) {
			break
		}
		g := load64(tags[pos:])
		tag := tagOf(e.h)
		empty := zeroBytes(g)
		first := empty & -empty
		if empty == 0 || zeroBytes(g^(lowBytes*uint64(tag)))&(first-1) != 0 {
			break
		}
		// The first tombstone before the empty position, else the empty one,
		// without a branch: whether a tombstone is there is unpredictable.
		at := zeroBytes(g^(lowBytes*tagDeleted))&(first-1) | first
		sh := uint(bits.TrailingZeros64(at)) &^ 7
		pos += uint32(sh / 8)
		tags[pos] = tag
		nodes[pos] = e.i
		used += 1 - int(g>>sh&0xff) // empty 0, tombstone 1
		count++
		w.slab.at(e.i).pos = pos | bit
		if used*4 > len(tags)*3 {
			x.used, x.count = used, count
			grow(x, &w.slab)
			return k + 1
		}
	}
	x.used, x.count = used, count
	return k
}

// flushOne indexes queued entry e with a full probe of both tables: one
// whose id is already pending replaces that entry, which is dropped.
func (w *Wheel[V]) flushOne(e pendEntry) {
	x := &w.index
	n := w.slab.at(e.i)
	id := w.slab.idView(e.i, n)
	pos, j, ok := findNew(x, &w.slab, id, e.h)
	if ok {
		x.nodes[pos] = e.i
		n.pos = pos | x.bit
		w.drop(j)
		return
	}
	if p, j, ok := findOld(x, &w.slab, id, e.h); ok {
		// Pending in the old table: take it out; the new entry goes
		// into the current one.
		x.deleteOld(p)
		w.drop(j)
	}
	x.insertAt(pos, e.i, e.h)
	n.pos = pos | x.bit
	if x.full() {
		grow(x, &w.slab) // leaves the rest of pend unindexed
	}
}

// Remove cancels id; false if not pending (never added, already fired, or removed).
func (w *Wheel[V]) Remove(id string) bool {
	w.flush()
	x := &w.index
	h := x.hash(id)
	// find reads the node index of a position once its tag matches. When the
	// CPU predicts the match, it issues that read before the tag arrives and
	// the two cache misses overlap; when it does not (the id is not at its
	// home position, or the branch history says otherwise), the misses came
	// one after the other. Prefetching both lines first overlaps them always:
	// cancel by id took 0.81-0.84x of the time without it (abwheels.sh). The
	// prefetch stays with the callers: inside find, ahead of its loop, the
	// same cancel took 1.16-1.18x as long (probably because find must then
	// save its arguments across the call before its first load).
	x.prefetchHome(h)
	pos, i, ok := find(x, &w.slab, id, h)
	switch {
	case ok:
		x.deleteCur(pos)
	case x.moving():
		if pos, i, ok = findOld(x, &w.slab, id, h); !ok {
			return false
		}
		x.deleteOld(pos)
	default:
		return false
	}
	// drop(i), written out: see there.
	if n := w.slab.at(i); !w.listed(n) {
		w.dropOther(i, n)
	} else if w.zombify(n) {
		w.sweepFromDrop()
	}
	return true
}

// RemoveHandle cancels the entry h refers to; false if it is no longer pending.
func (w *Wheel[V]) RemoveHandle(h Handle) bool {
	w.flush()
	if h.gen&1 == 0 || h.idx < 0 || h.idx >= w.slab.used {
		return false
	}
	n := w.slab.at(h.idx)
	if n.gen != h.gen {
		return false
	}
	w.index.deleteAt(n.pos)
	// drop(h.idx), written out: see there.
	if !w.listed(n) {
		w.dropOther(h.idx, n)
	} else if w.zombify(n) {
		w.sweepFromDrop()
	}
	return true
}

// drop ends the pending life of node i, already out of the index, in O(1)
// and without touching any other node: like a stopped runtime timer, the
// node stays where it is as a zombie (its generation bumped, so handles go
// stale and it never fires) and is freed when Advance, Next, a cascade or the
// heap reaches it. Unlinking it at once would write both of its list neighbours,
// two more cache misses than the lookup itself at a million entries.
//
// Zombies in the heap are also freed all at once when they pass a quarter of
// it. Zombies in lists are also freed by a sweep that starts when they
// outnumber the pending entries and goes through the slab 1024 nodes per
// Remove or Advance, so memory stays within a constant factor of the pending
// count and no call stalls on a whole pass. An entry of the overdue list is
// unlinked at once.
//
// Its common case, a list entry not yet due with an inline id, is made of
// pieces small enough to inline (listed, zombify), which Remove and
// RemoveHandle use written out, so that a cancel makes no call after its
// lookup unless a sweep step is due. With drop called (its switch and an
// unconditional call of maybeSweep) and flush called before the lookup, a
// cancel by id at a million entries took 1.15-1.19x as long (abwheels.sh);
// in a harness timing variants of Remove in turns on one wheel, the call of
// drop alone added 7-48 ns per piece (371-414 ns against 303-355 written
// out), more than those few instructions cost on their own. Our guess is that
// work queued behind the node's cache miss keeps the CPU from starting the
// next cancel's misses early.
func (w *Wheel[V]) drop(i int32) {
	if n := w.slab.at(i); !w.listed(n) {
		w.dropOther(i, n)
	} else if w.zombify(n) {
		w.sweepFromDrop()
	}
}

// listed reports whether pending node n takes drop's common case: in a
// list, not yet due, with an inline id.
func (w *Wheel[V]) listed(n *node[V]) bool {
	return n.next != inHeap && n.due > w.now && n.idLen != idLong
}

// zombify is drop's common case: n (listed) becomes a list zombie. It
// reports whether a sweep step is due.
func (w *Wheel[V]) zombify(n *node[V]) bool {
	retireNode(n)
	w.listZombies++
	return w.sweepAt >= 0 || w.zombiesOver()
}

// sweepFromDrop takes a sweep step for drop, unless Advance is running.
func (w *Wheel[V]) sweepFromDrop() {
	if !w.advancing {
		w.maybeSweep()
	}
}

// dropOther is drop for a node in the heap or the overdue list, or with a
// long id.
func (w *Wheel[V]) dropOther(i int32, n *node[V]) {
	switch {
	case n.next == inHeap:
		w.slab.retire(i)
		n.next = zombie
		w.zombies++
		if w.zombies > w.zombieFloor && w.zombies > len(w.heap)/4 {
			w.compactHeap()
		}
	case n.due <= w.now:
		// In the overdue list, which Next reads first: unlink it now.
		w.unlink(i)
		w.slab.release(i)
	default:
		w.slab.retire(i)
		w.listZombies++
	}
	if !w.advancing {
		w.maybeSweep()
	}
}

// freeZombie unlinks and frees node i, a zombie in a list.
func (w *Wheel[V]) freeZombie(i int32) {
	w.unlink(i)
	w.slab.push(i)
	w.listZombies--
}

// maybeSweep takes one step of the sweep of list zombies, starting one when
// they outnumber the pending entries and sweepFloor. A step visits the next
// sweepChunk nodes of the slab and frees the list zombies among them: a
// bounded time (sequential reads, an unlink per zombie). A pass frees every
// zombie that existed when it started; if zombies made behind it still pass
// the threshold, the next pass starts. Never from inside Advance, whose list
// walks hold node indexes.
//
// A step visits its nodes from the last to the first, so that the free list
// (last freed, first reused) hands them out in ascending order, which the
// CPU's prefetcher follows: the Adds that reuse them measured about 6%
// faster than with the nodes handed out in descending order.
func (w *Wheel[V]) maybeSweep() {
	if w.sweepAt < 0 {
		if !w.zombiesOver() {
			return
		}
		w.sweepAt = 0
	}
	end := min(w.sweepAt+int32(w.sweepChunk), w.slab.used)
	for i := end - 1; i >= w.sweepAt; i-- {
		// A list zombie: retired, and neither free (prev nilIdx) nor in the heap.
		if n := w.slab.at(i); n.gen&1 == 0 && n.prev != nilIdx && n.next != zombie {
			w.freeZombie(i)
		}
	}
	w.sweepAt = end
	if end >= w.slab.used {
		w.sweepAt = -1
		if w.zombiesOver() {
			w.sweepAt = 0
		}
	}
}

// zombiesOver reports whether list zombies outnumber the pending entries and
// sweepFloor.
func (w *Wheel[V]) zombiesOver() bool {
	return w.listZombies > max(w.index.count, w.sweepFloor)
}

// Reschedule moves a pending id to a new due time keeping its value; false if
// not pending.
func (w *Wheel[V]) Reschedule(id string, due time.Time) bool {
	w.flush()
	i, ok := lookup(&w.index, &w.slab, id)
	if !ok {
		return false
	}
	w.unlink(i)
	n := w.slab.at(i)
	n.due = w.rel(due)
	w.place(i, n)
	return true
}

// Get returns the pending entry's due time and value.
func (w *Wheel[V]) Get(id string) (due time.Time, v V, ok bool) {
	w.flush()
	i, ok := lookup(&w.index, &w.slab, id)
	if !ok {
		return time.Time{}, v, false
	}
	n := w.slab.at(i)
	return w.abs(n.due), n.v, true
}
