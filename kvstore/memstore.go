package kvstore

import (
	"bytes"
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// MemStore is the Store in memory, with the semantics of JetStore on a bucket with history 1:
// revisions come from one sequence shared by all keys (like a stream's), a delete leaves a marker
// that has its own revision, Create succeeds on a missing or deleted key, Update and Delete succeed
// only on the key's last revision (0: the key has no message). Values go through
// EncodeTask/DecodeTask as in the bucket. It is safe for concurrent use.
//
// Retention is the bucket's too, by the store's clock (WithClock): a write of a final record
// expires after the retention (WithRetention), leaving a delete marker with its own revision that
// watchers see as EventDelete; a marker (that one, or Delete's) goes after the marker TTL
// (WithMarkerTTL), leaving the key with no message. Expiries are applied when they are due at the
// start of every method (so Get, Create and a new Watch agree), and by Expire.
type MemStore struct {
	n         int
	retention time.Duration
	markerTTL time.Duration
	now       func() time.Time

	mu       sync.Mutex
	seq      uint64
	recs     map[string]memRec // by key: the key's last message
	expiries expiryHeap        // messages with a TTL, soonest first; stale entries are skipped
	watchers map[*memWatch]struct{}
}

// memRec is the last message of a key: a value, or a delete marker.
type memRec struct {
	rev     uint64
	deleted bool
	val     []byte
	ttl     time.Duration // the message's TTL; 0: none
}

// MemOption configures a MemStore.
type MemOption func(*MemStore)

// WithRetention sets how long a final record stays after its write (DefaultRetention if d <= 0).
func WithRetention(d time.Duration) MemOption {
	return func(m *MemStore) { m.retention = cmp.Or(max(d, 0), DefaultRetention) }
}

// Retention is how long a finished record stays after its final write (WithRetention).
func (m *MemStore) Retention() time.Duration { return m.retention }

// WithMarkerTTL sets how long a delete marker stays (DefaultMarkerTTL if d <= 0).
func WithMarkerTTL(d time.Duration) MemOption {
	return func(m *MemStore) { m.markerTTL = cmp.Or(max(d, 0), DefaultMarkerTTL) }
}

// WithClock sets the clock that expiries are judged by (time.Now if now is nil).
func WithClock(now func() time.Time) MemOption {
	return func(m *MemStore) {
		if now != nil {
			m.now = now
		}
	}
}

type memWatch struct {
	w          *watcher
	partitions []bool // by partition: watched or not
}

// NewMemStore returns an empty store with the given partition count (DefaultPartitions if < 1),
// DefaultRetention, DefaultMarkerTTL and time.Now unless opts say otherwise.
func NewMemStore(partitions int, opts ...MemOption) *MemStore {
	if partitions < 1 {
		partitions = DefaultPartitions
	}
	m := &MemStore{n: partitions, retention: DefaultRetention, markerTTL: DefaultMarkerTTL, now: time.Now,
		recs: make(map[string]memRec), watchers: make(map[*memWatch]struct{})}
	for _, opt := range opts {
		opt(m)
	}
	return m
}

// Expire applies the expiries due by the store's clock: each final record past its retention
// becomes a delete marker (watchers get EventDelete), each marker past its TTL goes. Every other
// method does this first; Expire is for telling watchers without another call.
func (m *MemStore) Expire() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire()
}

// expire applies the expiries due now. m.mu is held.
func (m *MemStore) expire() {
	now := m.now()
	for len(m.expiries) > 0 && !m.expiries[0].at.After(now) {
		x := heap.Pop(&m.expiries).(expiry)
		r, ok := m.recs[x.key]
		switch {
		case !ok || r.rev != x.rev:
			// Replaced or gone since: the entry is stale.
		case r.deleted:
			delete(m.recs, x.key)
		default:
			// As the server does: a marker that expires in its turn, from the moment the record did.
			m.writeAt(x.key, nil, true, m.markerTTL, x.at)
		}
	}
}

// expiry is when the message rev of key expires.
type expiry struct {
	at  time.Time
	key string
	rev uint64
}

// expiryHeap is a min-heap of expiries by time (container/heap).
type expiryHeap []expiry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(expiry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Partitions is the store's partition count.
func (m *MemStore) Partitions() int { return m.n }

// Create stores t if no record is under its key.
func (m *MemStore) Create(ctx context.Context, t *Task) (Entry, error) {
	key, val, err := m.encode(ctx, t)
	if err != nil {
		return Entry{}, fmt.Errorf("create: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire()
	if r, ok := m.recs[key]; ok && !r.deleted {
		cur, err := decodeEntry(t.ID, r.rev, bytes.Clone(r.val))
		if err != nil {
			return Entry{}, fmt.Errorf("create %s: %w, unreadable: %w", t.ID, ErrExists, err)
		}
		return cur, fmt.Errorf("create %s: %w at revision %d", t.ID, ErrExists, r.rev)
	}
	rev := m.write(key, val, false, m.ttl(t))
	return Entry{Task: *t, Revision: rev}, nil
}

// Get returns the current record of id.
func (m *MemStore) Get(ctx context.Context, id string) (Entry, error) {
	if err := ValidateID(id); err != nil {
		return Entry{}, err
	}
	if err := ctx.Err(); err != nil {
		return Entry{}, fmt.Errorf("get %s: %w", id, err)
	}
	m.mu.Lock()
	m.expire()
	r, ok := m.recs[Key(id, m.n)]
	m.mu.Unlock()
	if !ok || r.deleted {
		return Entry{}, fmt.Errorf("get %s: %w", id, ErrNotFound)
	}
	return decodeEntry(id, r.rev, bytes.Clone(r.val))
}

// Update replaces the record of t.ID if the key's last revision is rev.
func (m *MemStore) Update(ctx context.Context, t *Task, rev uint64) (uint64, error) {
	key, val, err := m.encode(ctx, t)
	if err != nil {
		return 0, fmt.Errorf("update: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire()
	if cur := m.recs[key].rev; cur != rev {
		return 0, fmt.Errorf("update %s at revision %d: %w: last revision is %d", t.ID, rev, ErrConflict, cur)
	}
	return m.write(key, val, false, m.ttl(t)), nil
}

// Delete removes the record of id if the key's last revision is rev, leaving a delete marker
// that goes after the marker TTL.
func (m *MemStore) Delete(ctx context.Context, id string, rev uint64) error {
	if err := ValidateID(id); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete %s: %w", id, err)
	}
	key := Key(id, m.n)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire()
	if cur := m.recs[key].rev; cur != rev {
		return fmt.Errorf("delete %s at revision %d: %w: last revision is %d", id, rev, ErrConflict, cur)
	}
	m.write(key, nil, true, m.markerTTL)
	return nil
}

// CreateAsync applies Create at once and calls done on another goroutine.
func (m *MemStore) CreateAsync(ctx context.Context, t *Task, done func(Entry, error)) {
	e, err := m.Create(ctx, t)
	go done(e, err)
}

// UpdateAsync applies Update at once and calls done on another goroutine.
func (m *MemStore) UpdateAsync(ctx context.Context, t *Task, rev uint64, done func(uint64, error)) {
	r, err := m.Update(ctx, t, rev)
	go done(r, err)
}

// DeleteAsync applies Delete at once and calls done on another goroutine.
func (m *MemStore) DeleteAsync(ctx context.Context, id string, rev uint64, done func(error)) {
	err := m.Delete(ctx, id, rev)
	go done(err)
}

// Watch delivers the current records of the partitions (all if none are given) in revision
// order, then EventInitDone, then live changes, until ctx ends or Stop.
func (m *MemStore) Watch(ctx context.Context, partitions ...int) (Watcher, error) {
	ps, err := checkPartitions(partitions, m.n)
	if err != nil {
		return nil, err
	}
	mw := &memWatch{w: newWatcher(), partitions: make([]bool, m.n)}
	for _, p := range ps {
		mw.partitions[p] = true
	}
	m.mu.Lock()
	m.expire()
	type kr struct {
		key string
		r   memRec
	}
	var initial []kr
	for k, r := range m.recs {
		if p, ok := keyPartition(k, m.n); ok && !r.deleted && mw.partitions[p] {
			initial = append(initial, kr{k, r})
		}
	}
	slices.SortFunc(initial, func(a, b kr) int { return cmp.Compare(a.r.rev, b.r.rev) })
	evs := make([]Event, 0, len(initial)+1)
	for _, x := range initial {
		evs = append(evs, memEvent(x.key, x.r))
	}
	mw.w.push(append(evs, Event{Kind: EventInitDone})...)
	m.watchers[mw] = struct{}{}
	m.mu.Unlock()

	go func() {
		mw.w.pump(ctx)
		m.mu.Lock()
		delete(m.watchers, mw)
		m.mu.Unlock()
		close(mw.w.done)
	}()
	return mw.w, nil
}

// Close does nothing; it is there so that both stores close the same way.
func (m *MemStore) Close() error { return nil }

// ttl is the TTL a write of t carries: the retention for a final record, none otherwise.
func (m *MemStore) ttl(t *Task) time.Duration {
	if t.Status.Final() {
		return m.retention
	}
	return 0
}

// write appends a message with the TTL ttl (0: none) to key under the next revision and tells the
// watchers. m.mu is held.
func (m *MemStore) write(key string, val []byte, deleted bool, ttl time.Duration) uint64 {
	return m.writeAt(key, val, deleted, ttl, m.now())
}

// writeAt is write of a message written at the time at, which its TTL counts from.
func (m *MemStore) writeAt(key string, val []byte, deleted bool, ttl time.Duration, at time.Time) uint64 {
	m.seq++
	r := memRec{rev: m.seq, deleted: deleted, val: val, ttl: ttl}
	m.recs[key] = r
	if ttl > 0 {
		heap.Push(&m.expiries, expiry{at: at.Add(ttl), key: key, rev: r.rev})
	}
	p, ok := keyPartition(key, m.n)
	if !ok {
		return r.rev
	}
	var ev *Event
	for mw := range m.watchers {
		if mw.partitions[p] {
			if ev == nil {
				e := memEvent(key, r)
				ev = &e
			}
			mw.w.push(*ev)
		}
	}
	return r.rev
}

// keyPartition is the partition of the task stored under key; false if key names no task.
func keyPartition(key string, n int) (int, bool) {
	id, ok := IDFromKey(key)
	if !ok {
		return 0, false
	}
	return Partition(id, n), true
}

func memEvent(key string, r memRec) Event {
	id, _ := IDFromKey(key)
	return recordEvent(id, r.rev, r.deleted, bytes.Clone(r.val))
}

func (m *MemStore) encode(ctx context.Context, t *Task) (key string, val []byte, err error) {
	if t == nil {
		return "", nil, fmt.Errorf("%w: nil task", ErrInvalidTask)
	}
	if err := ValidateID(t.ID); err != nil {
		return "", nil, err
	}
	if err := ctx.Err(); err != nil {
		return "", nil, err
	}
	if val, err = EncodeTask(t); err != nil {
		return "", nil, err
	}
	return Key(t.ID, m.n), val, nil
}

// putRaw stores val under key as it is, for tests of corrupt records.
func (m *MemStore) putRaw(key string, val []byte) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.write(key, val, false, 0)
}

// GetMany reads the current records of many tasks; missing, deleted and unreadable ones are left
// out, as JetStore.GetMany does.
func (m *MemStore) GetMany(ctx context.Context, ids []string) ([]Entry, error) {
	out := make([]Entry, 0, len(ids))
	for _, id := range ids {
		if e, err := m.Get(ctx, id); err == nil {
			out = append(out, e)
		} else if ctx.Err() != nil {
			return out, err
		}
	}
	return out, nil
}
