package bridge

import (
	"context"
	"sync"
	"time"

	"github.com/axbridge/axbridge/bridge/internal/sched"

	"github.com/axbridge/axbridge/kvstore"
)

// inflight remembers the records this replica claimed and fired, so that applying their ack is one
// CAS write instead of a read and a write. It is only a cache: a stale entry loses its CAS and
// the ack falls back to a fresh read. Workers add, ack workers take, the loop drops entries whose
// record left RUNNING (an ack applied by another replica, a lease expiry).
type inflight struct {
	mu    sync.Mutex
	m     map[string]kvstore.Entry
	bytes int // what the payload-holding entries of m cost (recordBytes)
	max   int // bound of bytes: past it, an entry keeps only what putOnce needs (review N6)

	// sent marks the attempts this process handled (published, or gave back as unpublishable),
	// by task id, so that a second path to a landed claim does neither again, even once the ack
	// took the record (take) or the cache kept a stub. A mark goes when the record moves past the
	// claim (drop), or sentKeep after the attempt's lease (sweep).
	sent    map[string]sentMark
	sweepAt int // len(sent) at which the next sweep runs

	times claimTimes // recent claim latencies, for the claim-ahead window (ahead.go)
}

// maxFiredBytes bounds what the cached records hold (payloads and headers), as the pre-read
// cache's bound does: past it, an attempt's ack reads its record instead.
const maxFiredBytes = 64 << 20

// sentKeep is how long past its lease's end an attempt's mark is kept.
const sentKeep = time.Minute

type sentMark struct {
	claim      uint64
	leaseUntil int64 // UTC Unix ms
}

func newInflight() *inflight {
	return &inflight{m: make(map[string]kvstore.Entry), max: maxFiredBytes, sent: map[string]sentMark{},
		sweepAt: minSweep}
}

const minSweep = 1024

// verdict is what a process does with a landed claim it reached (handle).
type verdict uint8

const (
	publishIt  verdict = iota // its lease runs: publish the attempt
	giveItBack                // its lease ended unpublished: give the attempt back uncounted
	handled                   // another path published it or gave it back already: nothing
)

// handle decides, once per attempt, what becomes of the landed claim e at nowMs, and caches its
// record when it is to be published.
func (f *inflight) handle(e kvstore.Entry, nowMs int64) verdict {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := e.Task.ID
	if m, ok := f.sent[id]; ok && m.claim == e.Task.Claim {
		return handled
	}
	if len(f.sent) >= f.sweepAt {
		f.sweep(nowMs)
	}
	f.sent[id] = sentMark{claim: e.Task.Claim, leaseUntil: e.Task.LeaseUntil}
	if nowMs >= e.Task.LeaseUntil {
		return giveItBack
	}
	f.set(e)
	return publishIt
}

// sweep forgets the marks of attempts whose lease ended over sentKeep ago (f.mu held).
func (f *inflight) sweep(nowMs int64) {
	for id, m := range f.sent {
		if addMs(m.leaseUntil, sentKeep) < nowMs {
			delete(f.sent, id)
		}
	}
	f.sweepAt = max(minSweep, 2*len(f.sent))
}

func (f *inflight) put(e kvstore.Entry) {
	f.mu.Lock()
	f.set(e)
	f.mu.Unlock()
}

// set stores e (f.mu held): whole while the bound leaves room, else a stub with the revision and
// claim only, which take does not hand out.
func (f *inflight) set(e kvstore.Entry) {
	f.remove(e.Task.ID)
	if n := sched.RecordBytes(&e.Task); f.bytes+n <= f.max {
		f.bytes += n
	} else {
		e = kvstore.Entry{Revision: e.Revision, Partial: true,
			Task: kvstore.Task{ID: e.Task.ID, Status: e.Task.Status, Claim: e.Task.Claim}}
	}
	f.m[e.Task.ID] = e
}

// remove forgets id (f.mu held).
func (f *inflight) remove(id string) {
	if e, ok := f.m[id]; ok {
		if !e.Partial {
			f.bytes -= sched.RecordBytes(&e.Task)
		}
		delete(f.m, id)
	}
}

// take removes and returns the cached record of id if it runs under the claim token and was kept
// whole.
func (f *inflight) take(id string, token uint64) (kvstore.Entry, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.m[id]
	if !ok || e.Task.Claim != token {
		return kvstore.Entry{}, false
	}
	f.remove(id)
	return e, !e.Partial
}

// drop forgets id unless the cached record is newer than rev, and its attempt's mark if rev is
// past the claim.
func (f *inflight) drop(id string, rev uint64) {
	f.mu.Lock()
	if e, ok := f.m[id]; ok && e.Revision <= rev {
		f.remove(id)
	}
	if m, ok := f.sent[id]; ok && m.claim < rev {
		delete(f.sent, id)
	}
	f.mu.Unlock()
}

// storeCallTimeout bounds each store call made to settle a claim or an ack.
const storeCallTimeout = 5 * time.Second

// getBounded is store.Get with storeCallTimeout.
func (b *Bridge) getBounded(ctx context.Context, id string) (kvstore.Entry, error) {
	ctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	defer cancel()
	return b.store.Get(ctx, id)
}

// dropIf forgets every record whose id drop reports true for (the partition moved away).
func (f *inflight) dropIf(drop func(id string) bool) {
	f.mu.Lock()
	for id := range f.m {
		if drop(id) {
			f.remove(id)
		}
	}
	f.mu.Unlock()
}

// attemptHolds notes, by task id and attempt token, the attempts that something this process began
// holds (a reply being written, a claim not yet answered), and since when.
type attemptHolds struct {
	mu sync.Mutex
	m  map[string]attemptHeld
}

type attemptHeld struct {
	token uint64
	n     int   // holds of that attempt
	at    int64 // when the first began, UTC Unix ms
}

// hold notes a hold on attempt token of id, begun at; the func it returns ends it (idempotent).
// A hold on a newer attempt replaces those on an older one.
func (h *attemptHolds) hold(id string, token uint64, at int64) func() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[string]attemptHeld)
	}
	if cur, ok := h.m[id]; ok && cur.token == token {
		cur.n++
		h.m[id] = cur
	} else {
		h.m[id] = attemptHeld{token: token, n: 1, at: at}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if cur, ok := h.m[id]; ok && cur.token == token {
				if cur.n--; cur.n == 0 {
					delete(h.m, id)
				} else {
					h.m[id] = cur
				}
			}
		})
	}
}

// holds reports whether attempt token of id has a hold begun at or before by.
func (h *attemptHolds) holds(id string, token uint64, by int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	cur, ok := h.m[id]
	return ok && cur.token == token && cur.at <= by
}
