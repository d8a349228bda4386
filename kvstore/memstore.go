package kvstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// MemStore is the Store in memory, with the semantics of JetStore on a bucket with history 1:
// revisions come from one sequence shared by all keys (like a stream's), a delete leaves a marker
// that has its own revision, Create succeeds on a missing or deleted key, Update and Delete succeed
// only on the key's last revision (0: the key was never written). Values go through
// EncodeTask/DecodeTask as in the bucket. It is safe for concurrent use.
type MemStore struct {
	n int

	mu       sync.Mutex
	seq      uint64
	recs     map[string]memRec // by key: the key's last message
	watchers map[*memWatch]struct{}
}

// memRec is the last message of a key: a value, or a delete marker.
type memRec struct {
	rev     uint64
	deleted bool
	val     []byte
}

type memWatch struct {
	w          *watcher
	partitions []bool // by partition: watched or not
}

// NewMemStore returns an empty store with the given partition count (DefaultPartitions if < 1).
func NewMemStore(partitions int) *MemStore {
	if partitions < 1 {
		partitions = DefaultPartitions
	}
	return &MemStore{n: partitions, recs: make(map[string]memRec), watchers: make(map[*memWatch]struct{})}
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
	if r, ok := m.recs[key]; ok && !r.deleted {
		cur, err := decodeEntry(t.ID, r.rev, r.val)
		if err != nil {
			return Entry{}, fmt.Errorf("create %s: %w, unreadable: %w", t.ID, ErrExists, err)
		}
		return cur, fmt.Errorf("create %s: %w at revision %d", t.ID, ErrExists, r.rev)
	}
	rev := m.write(key, val, false)
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
	r, ok := m.recs[Key(id, m.n)]
	m.mu.Unlock()
	if !ok || r.deleted {
		return Entry{}, fmt.Errorf("get %s: %w", id, ErrNotFound)
	}
	return decodeEntry(id, r.rev, r.val)
}

// Update replaces the record of t.ID if the key's last revision is rev.
func (m *MemStore) Update(ctx context.Context, t *Task, rev uint64) (uint64, error) {
	key, val, err := m.encode(ctx, t)
	if err != nil {
		return 0, fmt.Errorf("update: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur := m.recs[key].rev; cur != rev {
		return 0, fmt.Errorf("update %s at revision %d: %w: last revision is %d", t.ID, rev, ErrConflict, cur)
	}
	return m.write(key, val, false), nil
}

// Delete removes the record of id if the key's last revision is rev, leaving a delete marker.
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
	if cur := m.recs[key].rev; cur != rev {
		return fmt.Errorf("delete %s at revision %d: %w: last revision is %d", id, rev, ErrConflict, cur)
	}
	m.write(key, nil, true)
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

// write appends a message to key under the next revision and tells the watchers. m.mu is held.
func (m *MemStore) write(key string, val []byte, deleted bool) uint64 {
	m.seq++
	r := memRec{rev: m.seq, deleted: deleted, val: val}
	m.recs[key] = r
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
	return recordEvent(id, r.rev, r.deleted, r.val)
}

func (m *MemStore) encode(ctx context.Context, t *Task) (key string, val []byte, err error) {
	if t == nil {
		return "", nil, errors.New("kvstore: nil task")
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
	return m.write(key, val, false)
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
