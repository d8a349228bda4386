package bridge

import (
	"cmp"
	"context"
	"time"

	"github.com/axbridge/axbridge/kvstore"
	"github.com/axbridge/axbridge/timingwheel"
)

// jobKind says what a worker does with a task whose wheel entry came due.
type jobKind uint8

const (
	jobFire    jobKind = iota + 1 // WAITING and due: claim, then publish to ax.fire.<bizType>
	jobPreRead                    // WAITING and due soon: read the payload ahead of time
	jobLease                      // RUNNING and the lease ended: count the attempt as failed
	jobRetain                     // finished and retention ended: delete the record
)

// slot is what the wheel holds per task: one entry per task id, whatever its state.
type slot uint64

// newSlot packs a record revision and the job kind into the wheel's value: 8 bytes
// instead of a 16-byte struct, for every pending task. Revisions are stream sequences,
// far below 2^61.
func newSlot(rev uint64, kind jobKind) slot { return slot(rev<<3 | uint64(kind)) }

func (s slot) rev() uint64   { return uint64(s) >> 3 }
func (s slot) kind() jobKind { return jobKind(s & 7) }

// job is one unit of work for a worker. entry is set when the loop holds the record's payload;
// a jobPreRead carries many ids, read in one batch.
type job struct {
	kind  jobKind
	id    string
	rev   uint64
	entry *kvstore.Entry
	ids   []string
}

// preReadBatch is how many records one pre-read job reads at once.
const preReadBatch = 256

// result is a worker's report to the loop: put the task back in the wheel (retry a failed store
// call later, or a wall clock that is behind the monotonic one), or hand over a pre-read record.
type result struct {
	id      string
	rev     uint64
	kind    jobKind
	at      int64           // UTC Unix ms at which to try again
	entries []kvstore.Entry // pre-read records, for jobPreRead
}

// loopState is owned by the loop goroutine alone.
type loopState struct {
	b      *Bridge
	origin time.Time // monotonic origin: wall ms map onto the monotonic clock through it
	wheel  *timingwheel.Wheel[slot]
	near   map[string]*kvstore.Entry // records with payload, for tasks due within PreRead
	queue  []job                     // jobs the workers have not taken yet
	reads  []string                  // ids to pre-read, batched into jobs after each Advance
}

// loop is the scheduling loop: it owns the wheel, the pre-read cache and one timer armed to the
// wheel's next deadline. It reads watch events and worker results, and hands due work to workers.
// It closes b.jobs and b.loopEnd when it returns.
func (b *Bridge) loop(ctx context.Context, w kvstore.Watcher) {
	defer close(b.loopEnd)
	defer close(b.jobs)
	origin := b.cfg.Now()
	l := &loopState{
		b:      b,
		origin: origin,
		wheel:  timingwheel.New[slot](origin, timingwheel.Options{}),
		near:   make(map[string]*kvstore.Entry),
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	armed := time.Time{}
	events := w.Events()
	initDone := false
	for {
		var out chan<- job
		var next job
		if len(l.queue) > 0 {
			out, next = b.jobs, l.queue[0]
		}
		select {
		case <-ctx.Done():
			_ = w.Stop()
			return
		case ev, ok := <-events:
			if !ok {
				if ctx.Err() != nil {
					return
				}
				b.log.Warn("task watch ended; watching again")
				nw, err := b.store.Watch(ctx)
				if err != nil {
					b.log.Error("watch tasks", "err", err)
					select {
					case <-ctx.Done():
						return
					case <-time.After(time.Second):
					}
					continue
				}
				w, events = nw, nw.Events()
				continue
			}
			if ev.Kind == kvstore.EventInitDone && !initDone {
				initDone = true
				b.log.Info("tasks recovered from the bucket", "pending", l.wheel.Len())
				close(b.ready)
			}
			l.apply(ev)
		case r := <-b.results:
			l.result(r)
		case <-timer.C:
			armed = time.Time{}
		case out <- next:
			l.queue[0] = job{}
			l.queue = l.queue[1:]
		}
		now := b.cfg.Now()
		l.wheel.Advance(now, l.due)
		l.flushReads()
		if at, ok := l.wheel.Next(); ok && (armed.IsZero() || at.Before(armed)) {
			timer.Reset(at.Sub(now))
			armed = at
		}
		b.m.pending.Set(float64(l.wheel.Len()))
	}
}

// index gives id one wheel entry at the UTC Unix ms instant ms, mapped onto the monotonic clock
// as its offset from origin (AddAfter converts origin once for every call).
func (l *loopState) index(id string, ms int64, s slot) {
	l.wheel.AddAfter(id, l.origin, time.Duration(ms*int64(time.Millisecond)-l.origin.UnixNano()), s)
}

func (l *loopState) nowMs() int64 { return l.b.cfg.Now().UnixMilli() }

// apply indexes one watch event: every record has exactly one wheel entry, at the time its next
// step is due (fire, pre-read, lease end or retention end).
func (l *loopState) apply(ev kvstore.Event) {
	switch ev.Kind {
	case kvstore.EventPut:
		e := ev.Entry
		id := e.Task.ID
		if _, cur, ok := l.wheel.Get(id); ok && cur.rev() > e.Revision {
			return // an older revision than the one indexed
		}
		delete(l.near, id)
		t := &e.Task
		if t.Status != kvstore.StatusRunning {
			l.b.fired.drop(id, e.Revision)
		}
		switch {
		case t.Status == kvstore.StatusWaiting:
			if t.DueAt-l.nowMs() <= l.b.cfg.PreRead.Milliseconds() {
				l.near[id] = &e
				l.index(id, t.DueAt, newSlot(e.Revision, jobFire))
			} else {
				l.index(id, t.DueAt-l.b.cfg.PreRead.Milliseconds(), newSlot(e.Revision, jobPreRead))
			}
		case t.Status == kvstore.StatusRunning:
			l.index(id, t.LeaseUntil, newSlot(e.Revision, jobLease))
		case t.Status.Final():
			l.index(id, cmp.Or(t.FinishedAt, t.UpdatedAt)+l.b.cfg.Retention.Milliseconds(), newSlot(e.Revision, jobRetain))
		}
	case kvstore.EventDelete:
		l.b.fired.drop(ev.ID, ev.Revision)
		l.wheel.Remove(ev.ID)
		delete(l.near, ev.ID)
	case kvstore.EventError:
		l.b.m.corrupt.Inc()
		l.b.log.Error("unreadable task record; left alone", "task_id", ev.ID, "revision", ev.Revision, "err", ev.Err)
	}
}

// due is called by the wheel for each entry whose time has come.
func (l *loopState) due(id string, at time.Time, s slot) {
	j := job{kind: s.kind(), id: id, rev: s.rev()}
	switch s.kind() {
	case jobFire:
		if e, ok := l.near[id]; ok {
			delete(l.near, id)
			if e.Revision == s.rev() {
				j.entry = e
			}
		}
	case jobPreRead:
		// Index the fire itself now; the read result, if it comes in time, only adds the payload.
		// (near never holds a record whose slot is a pre-read: only apply sets that kind, and it
		// clears near first; result fills near only under a fire slot.)
		l.wheel.AddAfter(id, at, l.b.cfg.PreRead, newSlot(s.rev(), jobFire))
		l.reads = append(l.reads, id)
		return
	}
	l.queue = append(l.queue, j)
}

// flushReads turns the ids collected for pre-reading into batched read jobs.
func (l *loopState) flushReads() {
	for len(l.reads) > 0 {
		n := min(len(l.reads), preReadBatch)
		l.queue = append(l.queue, job{kind: jobPreRead, ids: l.reads[:n:n]})
		l.reads = l.reads[n:]
	}
	l.reads = nil
}

// result takes a worker's report back into the wheel.
func (l *loopState) result(r result) {
	if r.entries != nil { // pre-read records: keep those the wheel still expects at that revision
		for i := range r.entries {
			e := &r.entries[i]
			if _, cur, ok := l.wheel.Get(e.Task.ID); ok && cur.rev() == e.Revision && cur.kind() == jobFire {
				l.near[e.Task.ID] = e
			}
		}
		return
	}
	if _, cur, ok := l.wheel.Get(r.id); ok && cur.rev() > r.rev {
		return // a newer revision is indexed already
	}
	l.index(r.id, r.at, newSlot(r.rev, r.kind))
}
