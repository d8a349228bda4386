package bridge

import (
	"sync"

	"github.com/axbridge/axbridge/kvstore"
)

// inflight remembers the records this replica claimed and fired, so that applying their ack is one
// CAS write instead of a read and a write. It is only a cache: a stale entry loses its CAS and
// the ack falls back to a fresh read. Workers add, ack workers take, the loop drops entries whose
// record left RUNNING (an ack applied by another replica, a lease expiry).
type inflight struct {
	mu sync.Mutex
	m  map[string]kvstore.Entry
}

func newInflight() *inflight { return &inflight{m: make(map[string]kvstore.Entry)} }

func (f *inflight) put(e kvstore.Entry) {
	f.mu.Lock()
	f.m[e.Task.ID] = e
	f.mu.Unlock()
}

// take removes and returns the cached record of id if it is at attempt.
func (f *inflight) take(id string, attempt int) (kvstore.Entry, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.m[id]
	if !ok || e.Task.Attempt != attempt {
		return kvstore.Entry{}, false
	}
	delete(f.m, id)
	return e, true
}

// drop forgets id unless the cached record is newer than rev.
func (f *inflight) drop(id string, rev uint64) {
	f.mu.Lock()
	if e, ok := f.m[id]; ok && e.Revision <= rev {
		delete(f.m, id)
	}
	f.mu.Unlock()
}
