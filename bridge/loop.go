package bridge

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/axbridge/axbridge/kvstore"
)

// jobKind says what a worker does with a task whose index entry came due.
type jobKind uint8

const (
	jobFire    jobKind = iota + 1 // WAITING and due: claim, then publish to ax.fire.<bizType>
	jobPreRead                    // WAITING and due soon: read the payload ahead of time
	jobLease                      // RUNNING and the lease ended: count the attempt as failed
	jobPublish                    // RUNNING, claimed ahead and now due: the loop publishes it (ahead.go)
)

// job is one unit of work for a worker. entry is set when the loop holds the record's payload;
// a jobPreRead carries many ids, read in one batch.
type job struct {
	Kind  jobKind
	ID    string
	Rev   uint64
	Due   int64 // UTC Unix ms the step was due at
	Entry *kvstore.Entry
	IDs   []string
	// Unsure: a claim of revision rev had an unknown outcome; the fire reads the record back and
	// publishes the attempt if that claim landed (RUNNING under this replica with token rev).
	Unsure bool
	// Ahead: a fire taken up to this long before due may be claimed at once (Ahead.go); taken is
	// when (monotonic) the loop took it, from which the claim's latency is measured.
	Ahead time.Duration
	Taken time.Time
}

const (
	// preReadBatch is how many records one pre-read job reads at once.
	preReadBatch = 256
	// maxQueued bounds each of the loop's two job queues (fires; lease ends and pre-reads):
	// the loop takes due steps from its index only while its queue has room.
	maxQueued = 512
	// flightStale is how long a step handed to the workers counts as in progress for the
	// reconciler; a step that has not changed its record by then is repaired.
	flightStale = 30 * time.Second
)

// result is a worker's report to the loop: put the task back in the index (retry a failed store
// call later, or a record that is not due yet), or hand over pre-read records.
type result struct {
	ID      string
	Rev     uint64
	Kind    jobKind
	At      int64           // UTC Unix ms at which to try again
	Retry   bool            // a store call failed (the task stays overdue meanwhile)
	Unsure  bool            // the claim of rev had an unknown outcome: it may have landed
	Behind  bool            // a read returned an older revision than rev, or none: try again soon
	Created *kvstore.Entry  // a record intake just created: indexed as its watch event would be
	Entries []kvstore.Entry // pre-read records, for jobPreRead
	Held    *kvstore.Entry  // a claim that landed before its task is due: the loop publishes it then
}

const (
	// readBehindRetry is the first wait before a step whose read lagged its revision is tried
	// again; it doubles up to retryStoreAfter, for at most maxReadBehind tries.
	readBehindRetry = 20 * time.Millisecond
	maxReadBehind   = 12
)

// flight is a step taken from the index and not yet seen through: the revision it was taken at,
// whether it still waits in a job queue, when (monotonic) a worker took it, and when the task was
// due (UTC Unix ms; a fire's first due time, kept across retries).
type flight struct {
	rev    uint64
	queued bool
	at     time.Time
	due    int64
}

// loopState is owned by the loop goroutine alone.
type loopState struct {
	b          *Bridge
	now        reading // the latest reading of the clocks
	idx        *slots
	near       map[string]*kvstore.Entry // records with payload, due within PreRead (bounded)
	nearBytes  int
	fires      []job // fire jobs no worker has taken yet, in deadline order (at most maxQueued)
	house      []job // lease and pre-read jobs, after every fire (at most maxQueued)
	reads      []string
	flight     map[string]flight         // steps taken from the index whose record has not changed since
	retrying   map[string]int64          // fires put back after a failed store call: id → when the task was due
	unsure     map[string]uint64         // claims whose outcome was unknown: id → the claim's token
	held       map[string]*kvstore.Entry // claims landed ahead of their due time (ahead.go), indexed as jobPublish
	ahead      time.Duration             // the claim-ahead window, recomputed every aheadRefresh
	aheadAt    time.Time                 // monotonic: when ahead was computed
	aheadUntil int64                     // UTC Unix ms: the latest due time of a fire handed out ahead of it
	behind     map[string]int            // steps whose read lagged the indexed revision: id → tries so far
	clock      stepDetector
	owned      []bool           // by partition: the partitions this loop indexes and watches
	loading    func(p int) bool // whether a watch is still loading partition p
	fromHouse  bool             // the job nextJob returned is the head of house, not of fires
	firesInRow int              // fires handed out since the last housekeeping job
	lastStats  time.Time        // monotonic: when the overdue gauges were last computed
	lastPrune  time.Time
}

// loop is the scheduling loop: it owns the index, the pre-read cache and one timer armed to the
// next due step (at most idleCheck away). It reads watch events, worker results and the
// reconciler's findings, and hands due work to workers, fires first. A watch that ends is started
// again on another goroutine while the loop keeps firing from its index. When the partitions this
// replica owns change, it drops what it indexed of those it lost and starts a watch of just the
// partitions it gained the same way, which joins the running watch (watchSet): the gain's tasks
// fire as soon as its own load is done, and what the replica kept is not loaded again. A change
// with nothing gained, or one that would make the set too large, replaces the watch by one of the
// new set (the old one runs until that is up). first watches parts, the partitions owned at Start
// (nil if none). It closes b.jobs and b.loopEnd when it returns, after its helper goroutines have
// ended.
func (b *Bridge) loop(ctx context.Context, first kvstore.Watcher, parts []int) {
	defer close(b.loopEnd)
	defer close(b.jobs)
	var helpers sync.WaitGroup
	watches := make(chan watchMsg, 1) // re-watch goroutine → loop: a new running watch
	var pending context.CancelFunc
	defer func() {
		if pending != nil {
			pending()
		}
		helpers.Wait()
		select { // a watch started again just as the loop ended
		case nw := <-watches:
			_ = nw.w.Stop()
		default:
		}
	}()
	// gen numbers the re-watches; pending ends the one running, if any (a watch it hands over
	// lives under that context, which the watch set ends when it stops).
	var gen uint64
	start := func(parts []int, gain bool) {
		gen++
		rctx, cancel := context.WithCancel(ctx)
		pending = cancel
		g := gen
		helpers.Add(1)
		go func() {
			defer helpers.Done()
			b.rewatch(rctx, watches, watchMsg{parts: parts, gen: g, gain: gain})
		}()
	}
	// restart starts a watch of parts that replaces the running one, and ends one on its way.
	restart := func(parts []int) {
		if pending != nil {
			pending()
			pending = nil
		}
		if len(parts) == 0 {
			gen++
			return
		}
		start(parts, false)
	}
	l := &loopState{
		b:        b,
		idx:      newSlots(),
		near:     make(map[string]*kvstore.Entry),
		flight:   make(map[string]flight),
		retrying: make(map[string]int64),
		unsure:   make(map[string]uint64),
		held:     make(map[string]*kvstore.Entry),
		behind:   make(map[string]int),
		owned:    make([]bool, b.nparts),
	}
	for _, p := range parts {
		l.owned[p] = true
	}
	l.now = b.read()
	l.clock.check(l.now)
	timer := time.NewTimer(idleCheck)
	defer timer.Stop()

	var w *watchSet
	var events <-chan kvstore.Event
	if first != nil {
		w = newWatchSet(first, nil, parts)
		events = w.Events()
	}
	// The reconciler leaves alone the partitions a watch is still loading: their records are on
	// their way (review N9).
	l.loading = func(p int) bool { return w != nil && w.isLoading(p) }
	defer func() {
		if w != nil {
			_ = w.Stop()
		}
	}()
	found := make(chan reconcileMsg) // reconciler ⇄ loop: records the index may have missed
	helpers.Add(1)
	go func() {
		defer helpers.Done()
		b.reconcile(ctx, found)
	}()
	b.m.loop.watchUp.Set(1)
	var watchDown time.Time
	initDone := false
	if w == nil { // no partitions of its own yet: nothing to load
		initDone = true
		close(b.ready)
	}
	for {
		out, next := l.nextJob()
		select {
		case <-ctx.Done():
			l.drainHeld()
			return
		case ev, ok := <-events:
			if !ok {
				_ = w.Stop()
				w, events = nil, nil
				if ctx.Err() != nil {
					l.drainHeld()
					return
				}
				watchDown = time.Now()
				b.m.loop.watchRestarts.Inc()
				b.m.loop.watchUp.Set(0)
				if pending == nil { // else the watch of the new partition set is on its way
					b.log.Warn("task watch ended; starting it again while tasks keep firing from the index")
					restart(l.ownedList())
				}
				break
			}
			l.now = b.read()
			for n := 0; ; n++ {
				if ev.Kind == kvstore.EventInitDone && !initDone {
					initDone = true
					b.log.Info("tasks recovered from the bucket", "pending", l.idx.len())
					close(b.ready)
				} else if ev.Kind == kvstore.EventInitDone {
					b.log.Debug("partitions loaded", "pending", l.idx.len())
				}
				l.apply(ev)
				if n == 255 {
					break
				}
				if ev, ok = tryRecv(events); !ok {
					break
				}
			}
		case nw := <-watches:
			if nw.gen != gen { // a re-watch of a set that changed meanwhile
				_ = nw.w.Stop()
				break
			}
			cancel := pending
			pending = nil
			if nw.gain {
				// A watch of gained partitions joins the running one. If that has ended
				// meanwhile, its restart (once the loop sees the end) covers them.
				if w == nil || !w.add(nw.w, cancel, nw.parts) {
					restart(l.ownedList())
				}
				break
			}
			if w != nil {
				_ = w.Stop()
			} else {
				b.log.Info("task watch running again", "down_for", time.Since(watchDown).Round(time.Millisecond))
			}
			w = newWatchSet(nw.w, cancel, nw.parts)
			events = w.Events()
			b.m.loop.watchUp.Set(1)
		case <-b.ownChanged:
			o := b.own.Load()
			if slices.Equal(o.parts, l.owned) {
				break
			}
			l.now = b.read()
			gained := gainedParts(l.owned, o.parts)
			l.reown(o.parts)
			if len(gained) > 0 && w != nil && pending == nil && w.size() < maxWatches {
				// Load only the gain, so that its tasks fire as soon as it is loaded; the running
				// watch goes on (what it brings of partitions lost, apply drops).
				w.expect(gained)
				start(gained, true)
			} else {
				if w != nil {
					w.expect(o.owned()) // until the set that replaces it is up
				}
				restart(o.owned())
			}
			if o.n == 0 && w != nil { // nothing to watch until partitions come back
				_ = w.Stop()
				w, events = nil, nil
			}
		case r := <-b.results:
			l.now = b.read()
			l.result(r)
		case m := <-found:
			l.now = b.read()
			l.reconciled(m)
		case <-timer.C:
		case out <- next:
			l.sent(next)
			for { // hand out more while workers are waiting, without a turn each
				if out, next = l.nextJob(); out == nil {
					break
				}
				select {
				case out <- next:
					l.sent(next)
					continue
				default:
				}
				break
			}
		}
		l.turn()
		timer.Reset(l.wait())
	}
}

// maxWatches bounds the watches of the loop's watch set: past it, a gain restarts one watch of
// all partitions owned, which also drops the filters of those lost since.
const maxWatches = 4

// gainedParts is the partitions owned in next and not in cur.
func gainedParts(cur, next []bool) []int {
	var gained []int
	for p, has := range next {
		if has && (p >= len(cur) || !cur[p]) {
			gained = append(gained, p)
		}
	}
	return gained
}

// tryRecv receives from ch if a value is ready; ok is false otherwise or if ch is closed (the
// next select sees the close).
func tryRecv(ch <-chan kvstore.Event) (kvstore.Event, bool) {
	select {
	case ev, ok := <-ch:
		return ev, ok
	default:
		return kvstore.Event{}, false
	}
}

// houseEvery is how many fires go out before a waiting lease end or pre-read: fires come first,
// but a backlog of overdue fires must not hold back lease expiries for good.
const houseEvery = 8

// nextJob is the job to hand out next (fires first, a housekeeping job after every houseEvery
// fires), with the channel to send it on; a nil channel when there is none.
func (l *loopState) nextJob() (chan<- job, job) {
	l.fromHouse = len(l.house) > 0 && (len(l.fires) == 0 || l.firesInRow >= houseEvery)
	switch {
	case l.fromHouse:
		return l.b.jobs, l.house[0]
	case len(l.fires) > 0:
		return l.b.jobs, l.fires[0]
	}
	return nil, job{}
}

// sent drops the job j a worker took from its queue; the step is now in the worker's hands.
func (l *loopState) sent(j job) {
	if f, ok := l.flight[j.ID]; ok && j.Kind != jobPreRead && f.rev == j.Rev {
		l.flight[j.ID] = flight{rev: j.Rev, at: l.now.mono, due: f.due}
	}
	if j.Kind == jobFire && j.Ahead > 0 {
		l.aheadUntil = max(l.aheadUntil, j.Due)
	}
	q := &l.fires
	l.firesInRow++
	if l.fromHouse {
		q, l.firesInRow = &l.house, 0
	}
	(*q)[0] = job{}
	*q = (*q)[1:]
	if len(*q) == 0 {
		*q = nil
	}
}

// turn runs after every event: it reads the clocks, notices a wall-clock step, takes the steps
// that are due into the job queues while they have room, and updates the gauges.
func (l *loopState) turn() {
	b := l.b
	l.now = b.read()
	if step, ok := l.clock.check(l.now); ok {
		dir := "forward"
		if step < 0 {
			dir = "backward"
		}
		b.m.loop.clockSteps.WithLabelValues(dir).Inc()
		b.log.Warn("wall clock stepped; due times are judged by the new reading", "step", step)
	}
	l.take()
	l.flushReads()
	l.stats()
}

// wait is how long the loop may sleep: until the next step it could take, at most idleCheck.
func (l *loopState) wait() time.Duration {
	d := idleCheck
	if !l.b.alive() {
		return d
	}
	// PeekDue, not peek: only the due times matter here, and it copies no id.
	if len(l.fires) < maxQueued {
		if due, ok := l.idx.x.PeekDue(heapFire); ok {
			d = l.now.until(subMs(due, l.ahead), d)
		}
	}
	if due, ok := l.idx.x.PeekDue(heapPublish); ok {
		d = l.now.until(due, d)
	}
	if len(l.house) < maxQueued {
		if due, ok := l.idx.x.PeekDue(heapHouse); ok {
			d = l.now.until(due, d)
		}
	}
	return d
}

// take moves due steps from the index into the job queues, in deadline order, while the queues
// have room; the rest stays indexed until a later turn.
func (l *loopState) take() {
	if !l.b.alive() {
		return // fenced: nothing is claimed until a heartbeat is confirmed (which wakes the loop)
	}
	ms := l.now.ms
	l.publishDue()
	l.refreshAhead()
	for len(l.fires) < maxQueued {
		n, ok := l.idx.peek(heapFire)
		if !ok || subMs(n.due, l.ahead) > ms {
			break
		}
		l.idx.pop(heapFire)
		if n.kind == jobPreRead {
			// Index the fire itself now; the read, if it comes back in time, only adds the payload.
			l.idx.put(n.id, addMs(n.due, l.b.cfg.PreRead), n.rev, jobFire)
			l.preRead(n.id)
			continue
		}
		j := job{Kind: jobFire, ID: n.id, Rev: n.rev, Due: n.due, Ahead: l.ahead, Taken: l.now.mono}
		if tok, ok := l.unsure[n.id]; ok && tok == n.rev {
			j.Unsure = true // the worker owns the read-back now
			delete(l.unsure, n.id)
		}
		if due, ok := l.retrying[n.id]; ok {
			j.Due = due
			delete(l.retrying, n.id)
		}
		if e, ok := l.near[n.id]; ok {
			l.dropNear(n.id)
			if e.Revision == n.rev {
				j.Entry = e
			}
		}
		l.fires = append(l.fires, j)
		l.flight[n.id] = flight{rev: n.rev, queued: true, due: j.Due}
	}
	for len(l.house) < maxQueued {
		n, ok := l.idx.peek(heapHouse)
		if !ok || n.due > ms {
			break
		}
		l.idx.pop(heapHouse)
		l.house = append(l.house, job{Kind: jobLease, ID: n.id, Rev: n.rev, Due: n.due})
		l.flight[n.id] = flight{rev: n.rev, queued: true, due: n.due}
	}
}

// preRead queues id for the next batched pre-read, if the pre-read bounds leave room.
func (l *loopState) preRead(id string) {
	if len(l.near)+len(l.reads) < l.b.cfg.MaxPreReadTasks && l.nearBytes < l.b.cfg.MaxPreReadBytes {
		l.reads = append(l.reads, id)
	}
}

// flushReads turns the ids collected for pre-reading into batched read jobs, while the
// housekeeping queue has room.
func (l *loopState) flushReads() {
	for len(l.reads) > 0 && len(l.house) < maxQueued {
		n := min(len(l.reads), preReadBatch)
		l.house = append(l.house, job{Kind: jobPreRead, IDs: l.reads[:n:n]})
		l.reads = l.reads[n:]
	}
	if len(l.reads) == 0 {
		l.reads = nil
	}
}

// leaseDue is when a RUNNING task's lease counts as ended here: at LeaseUntil for its owner, a skew
// margin later for any other replica, whose clock may run ahead of the owner's.
func (b *Bridge) leaseDue(t *kvstore.Task) int64 {
	if t.Owner == b.cfg.ReplicaID {
		return t.LeaseUntil
	}
	return addMs(t.LeaseUntil, b.cfg.LeaseSkew)
}

// apply indexes one watch event: every live record has exactly one entry, at the time its next
// step is due (fire, pre-read or lease end); a finished record has none (the server retires it).
func (l *loopState) apply(ev kvstore.Event) {
	if ev.Kind != kvstore.EventInitDone && !l.ownsID(ev.ID) {
		return // a partition that moved away (its old watch runs until the new one is up)
	}
	switch ev.Kind {
	case kvstore.EventPut:
		e := ev.Entry
		id := e.Task.ID
		if cur, ok := l.idx.get(id); ok && (cur.rev > e.Revision || cur.rev == e.Revision && e.Partial) {
			// An older revision than the one indexed, or the state of the one indexed again (a
			// watch started again): nothing new, and the payload held near stays.
			return
		}
		if h, ok := l.held[id]; ok {
			if e.Revision <= h.Revision {
				return // the claim's own write: its fire stays due at the due time
			}
			delete(l.held, id) // a newer write wins: the fire held for the due time is dropped
		}
		if f, ok := l.flight[id]; ok {
			if f.rev >= e.Revision {
				return // a worker has this revision in hand (a watch started again replays it)
			}
			delete(l.flight, id)
		}
		delete(l.retrying, id)
		delete(l.behind, id)
		l.dropNear(id)
		t := &e.Task
		if tok, ok := l.unsure[id]; ok && e.Revision > tok {
			delete(l.unsure, id)
			if l.b.ownClaim(t, tok) {
				// The claim whose outcome was unknown landed: publish its attempt now. A partial
				// entry (no payload) cannot be published: the worker reads the record back.
				j := job{Kind: jobFire, ID: id, Rev: tok, Due: t.DueAt, Unsure: true}
				if !e.Partial {
					ec := e
					j.Entry = &ec
				}
				l.fires = append(l.fires, j)
			}
		}
		if t.Status != kvstore.StatusRunning {
			l.b.fired.drop(id, e.Revision)
		}
		switch t.Status {
		case kvstore.StatusWaiting:
			if t.DueAt <= addMs(l.now.ms, l.b.cfg.PreRead) {
				if e.Partial {
					// Its payload was not loaded (a watch's initial values): read it now, in a
					// batch with the others, and keep the record read back, not this one. An
					// overdue one is fired at once, and its fire reads the record itself.
					if t.DueAt > l.now.ms {
						l.preRead(id)
					}
				} else {
					l.keepNear(&e)
				}
				l.idx.put(id, t.DueAt, e.Revision, jobFire)
			} else {
				l.idx.put(id, subMs(t.DueAt, l.b.cfg.PreRead), e.Revision, jobPreRead)
			}
		case kvstore.StatusRunning:
			l.idx.put(id, l.b.leaseDue(t), e.Revision, jobLease)
		default: // final: nothing more to do here
			l.idx.remove(id)
		}
	case kvstore.EventDelete:
		l.b.fired.drop(ev.ID, ev.Revision)
		if cur, ok := l.idx.get(ev.ID); ok && cur.rev > ev.Revision {
			return
		}
		l.idx.remove(ev.ID)
		l.dropNear(ev.ID)
		delete(l.held, ev.ID)
		delete(l.flight, ev.ID)
		delete(l.retrying, ev.ID)
		delete(l.unsure, ev.ID)
		delete(l.behind, ev.ID)
	case kvstore.EventError:
		l.b.m.corrupt.Inc()
		l.b.log.Error("unreadable task record; left alone", "task_id", ev.ID, "revision", ev.Revision, "err", ev.Err)
		if cur, ok := l.idx.get(ev.ID); ok && cur.rev < ev.Revision {
			l.idx.remove(ev.ID) // its older revision is gone: reading it again cannot help
			l.dropNear(ev.ID)
			delete(l.held, ev.ID)
			delete(l.retrying, ev.ID)
		}
	}
}

// recordOverhead is roughly what a held record costs besides its payload and headers: the Entry,
// its strings and the map entry.
const recordOverhead = 384

// recordBytes is what holding a record in memory costs, roughly.
func recordBytes(t *kvstore.Task) int {
	n := recordOverhead + len(t.Payload) + len(t.ID) + len(t.BizType) + len(t.LastError)
	for k, vs := range t.Header {
		n += len(k)
		for _, v := range vs {
			n += len(v)
		}
	}
	return n
}

// keepNear holds e with its payload, if the pre-read bounds leave room. A partial entry has no
// payload to hold: a fire taking it would publish an empty body.
func (l *loopState) keepNear(e *kvstore.Entry) {
	if e.Partial {
		return
	}
	n := recordBytes(&e.Task)
	if len(l.near) >= l.b.cfg.MaxPreReadTasks || l.nearBytes+n > l.b.cfg.MaxPreReadBytes {
		return
	}
	l.dropNear(e.Task.ID)
	l.near[e.Task.ID] = e
	l.nearBytes += n
}

func (l *loopState) dropNear(id string) {
	if e, ok := l.near[id]; ok {
		l.nearBytes -= recordBytes(&e.Task)
		delete(l.near, id)
	}
}

// result takes a worker's report back into the index.
func (l *loopState) result(r result) {
	if e := r.Created; e != nil {
		l.apply(kvstore.Event{Kind: kvstore.EventPut, ID: e.Task.ID, Revision: e.Revision, Entry: *e})
		return
	}
	if r.Held != nil { // a claim that landed is fired even if its partition moved (ahead.go)
		l.hold(r.Held)
		return
	}
	if r.Entries == nil && !l.ownsID(r.ID) && !r.Unsure {
		l.forget(r.ID) // the partition moved away while a worker had the step
		return
	}
	if r.Entries != nil { // pre-read records: keep those the index still expects at that revision
		for i := range r.Entries {
			e := &r.Entries[i]
			if cur, ok := l.idx.get(e.Task.ID); ok && cur.rev == e.Revision && cur.kind == jobFire {
				l.keepNear(e)
			}
		}
		return
	}
	newer := false
	if cur, ok := l.idx.get(r.ID); ok && cur.rev > r.Rev {
		newer = true
	} else if f, ok := l.flight[r.ID]; ok && f.rev > r.Rev {
		newer = true
	}
	switch {
	case r.Unsure && newer:
		// The watch brought a newer revision before the claim's outcome: it may be that claim.
		// A worker reads the record back and publishes the attempt if so.
		l.fires = append(l.fires, job{Kind: jobFire, ID: r.ID, Rev: r.Rev, Due: l.now.ms, Unsure: true})
		return
	case newer:
		return // a newer revision is indexed already
	case r.Unsure:
		l.unsure[r.ID] = r.Rev
	case r.Behind:
		if f, ok := l.flight[r.ID]; !ok || f.rev != r.Rev {
			return // a delete or a newer revision came meanwhile
		}
		n := l.behind[r.ID] + 1
		if n > maxReadBehind {
			delete(l.behind, r.ID)
			delete(l.flight, r.ID)
			l.b.log.Warn("task not found at the revision the index has; left to the reconciler", "task_id", r.ID, "revision", r.Rev)
			return
		}
		l.behind[r.ID] = n
		r.At = addMs(l.now.ms, min(readBehindRetry<<(n-1), retryStoreAfter))
	}
	due := r.At
	if f, ok := l.flight[r.ID]; ok && f.rev <= r.Rev {
		due = min(due, f.due)
		delete(l.flight, r.ID)
	}
	l.idx.put(r.ID, r.At, r.Rev, r.Kind)
	if r.Retry && r.Kind == jobFire && due < r.At {
		l.retrying[r.ID] = due // still overdue while it waits for its retry
	}
}

// stats updates the gauges: the cheap ones every turn, the overdue ones at most once a second.
func (l *loopState) stats() {
	m := l.b.m
	queued := len(l.fires) + len(l.house)
	m.pending.Set(float64(l.idx.len()))
	m.loop.queued.Set(float64(queued))
	m.loop.preRead.Set(float64(len(l.near)))
	m.loop.preReadBytes.Set(float64(l.nearBytes))
	if obs := m.loop.observe; obs != nil {
		obs(loopStats{queued: queued, preRead: len(l.near), preReadBytes: l.nearBytes, indexed: l.idx.len(), held: len(l.held)})
	}
	if l.now.mono.Sub(l.lastStats) < idleCheck {
		return
	}
	l.lastStats = l.now.mono
	l.b.outage.tick()
	n, oldest := l.idx.countDue(heapFire, l.now.ms, jobFire)
	for _, j := range l.fires {
		if j.Due > l.now.ms {
			continue // taken ahead of its due time
		}
		if n == 0 || j.Due < oldest {
			oldest = j.Due
		}
		n++
	}
	for id, due := range l.retrying {
		if e, ok := l.idx.get(id); ok && e.due > l.now.ms && due <= l.now.ms { // not counted above
			if n == 0 || due < oldest {
				oldest = due
			}
			n++
		}
	}
	m.loop.overdue.Set(float64(n))
	age := 0.0
	if n > 0 {
		age = float64(l.now.ms-oldest) / 1000
	}
	m.loop.oldestOverdue.Set(age)
	if l.now.mono.Sub(l.lastPrune) >= 10*flightStale {
		l.lastPrune = l.now.mono
		for id, f := range l.flight {
			if !f.queued && l.now.mono.Sub(f.at) >= 10*flightStale {
				delete(l.flight, id)
			}
		}
	}
}
