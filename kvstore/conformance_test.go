package kvstore_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axbridge/axbridge/kvstore"
)

// harness is one store under test plus a way to write raw bytes under a key, bypassing the codec,
// and to look at the last message under a key.
type harness struct {
	store  kvstore.Store
	putRaw func(t *testing.T, key string, val []byte)
	// last describes the last message under the key of id: whether there is one, whether it is a
	// delete marker, and its Nats-TTL ("" if none).
	last func(t *testing.T, id string) (present, marker bool, ttl string)
	// advance moves the store's clock on; nil if the store runs on real time, where a test waits
	// (bounded) for what is due instead.
	advance func(d time.Duration)
	cfg     harnessConfig
}

// harnessConfig is what a test asks of its store.
type harnessConfig struct {
	retention time.Duration // of final records; kvstore.DefaultRetention if 0
	markerTTL time.Duration // of delete markers; kvstore.DefaultMarkerTTL if 0
	batchMax  int           // JetStore.Config.BatchMax; 1000 (grouped) if 0
}

type harnessOpt func(*harnessConfig)

// withTTLs asks for a store whose final records expire after retention and whose markers after
// markerTTL.
func withTTLs(retention, markerTTL time.Duration) harnessOpt {
	return func(c *harnessConfig) { c.retention, c.markerTTL = retention, markerTTL }
}

func newHarnessConfig(opts []harnessOpt) harnessConfig {
	c := harnessConfig{retention: kvstore.DefaultRetention, markerTTL: kvstore.DefaultMarkerTTL}
	for _, opt := range opts {
		opt(&c)
	}
	return c
}

// waitTimeout bounds every wait for an event or an async outcome.
const waitTimeout = 15 * time.Second

// testStore is the conformance suite: every Store implementation must pass it.
func testStore(t *testing.T, newHarness func(t *testing.T, opts ...harnessOpt) harness) {
	t.Run("CreateGetUpdateDelete", func(t *testing.T) {
		t.Parallel()
		s, ctx := newHarness(t).store, testContext(t)
		task := newTask("crud-1")
		e, err := s.Create(ctx, task)
		if err != nil || e.Revision == 0 {
			t.Fatalf("Create: %v, revision %d", err, e.Revision)
		}
		got := mustGet(t, s, "crud-1")
		if got.Revision != e.Revision || !reflect.DeepEqual(got.Task, *task) {
			t.Fatalf("Get = %+v at %d, want %+v at %d", got.Task, got.Revision, *task, e.Revision)
		}
		task.Status, task.Attempt, task.Owner = kvstore.StatusRunning, 1, "r1"
		rev, err := s.Update(ctx, task, e.Revision)
		if err != nil || rev <= e.Revision {
			t.Fatalf("Update: %v, revision %d after %d", err, rev, e.Revision)
		}
		if got := mustGet(t, s, "crud-1"); got.Revision != rev || !reflect.DeepEqual(got.Task, *task) {
			t.Fatalf("Get after Update = %+v at %d", got.Task, got.Revision)
		}
		if err := s.Delete(ctx, "crud-1", rev); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if _, err := s.Get(ctx, "crud-1"); !errors.Is(err, kvstore.ErrNotFound) {
			t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
		}
	})

	t.Run("CreateExisting", func(t *testing.T) {
		t.Parallel()
		s, ctx := newHarness(t).store, testContext(t)
		first := newTask("dup-1")
		e1 := mustCreate(t, s, first)
		second := newTask("dup-1")
		second.Payload = []byte("another payload")
		e2, err := s.Create(ctx, second)
		if !errors.Is(err, kvstore.ErrExists) {
			t.Fatalf("second Create: %v, want ErrExists", err)
		}
		if e2.Revision != e1.Revision || !reflect.DeepEqual(e2.Task, *first) {
			t.Fatalf("second Create returned %+v at %d, want the first record at %d", e2.Task, e2.Revision, e1.Revision)
		}
	})

	t.Run("CreateAfterDelete", func(t *testing.T) {
		t.Parallel()
		s, ctx := newHarness(t).store, testContext(t)
		e := mustCreate(t, s, newTask("again-1"))
		if err := s.Delete(ctx, "again-1", e.Revision); err != nil {
			t.Fatal(err)
		}
		task := newTask("again-1")
		task.Attempt = 2
		e2, err := s.Create(ctx, task)
		if err != nil || e2.Revision <= e.Revision {
			t.Fatalf("Create after Delete: %v, revision %d after %d", err, e2.Revision, e.Revision)
		}
		if got := mustGet(t, s, "again-1"); got.Task.Attempt != 2 || got.Revision != e2.Revision {
			t.Fatalf("Get = attempt %d at %d", got.Task.Attempt, got.Revision)
		}
	})

	t.Run("Conflicts", func(t *testing.T) {
		t.Parallel()
		s, ctx := newHarness(t).store, testContext(t)
		task := newTask("cas-1")
		e := mustCreate(t, s, task)
		rev, err := s.Update(ctx, task, e.Revision)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Update(ctx, task, e.Revision); !errors.Is(err, kvstore.ErrConflict) {
			t.Errorf("stale Update: %v, want ErrConflict", err)
		}
		if err := s.Delete(ctx, "cas-1", e.Revision); !errors.Is(err, kvstore.ErrConflict) {
			t.Errorf("stale Delete: %v, want ErrConflict", err)
		}
		if got := mustGet(t, s, "cas-1"); got.Revision != rev {
			t.Errorf("record at revision %d after refused writes, want %d", got.Revision, rev)
		}
		if _, err := s.Update(ctx, newTask("cas-missing"), rev); !errors.Is(err, kvstore.ErrConflict) {
			t.Errorf("Update of a missing key: %v, want ErrConflict", err)
		}
		if err := s.Delete(ctx, "cas-missing", rev); !errors.Is(err, kvstore.ErrConflict) {
			t.Errorf("Delete of a missing key: %v, want ErrConflict", err)
		}
	})

	t.Run("GetMissingAndInvalid", func(t *testing.T) {
		t.Parallel()
		s, ctx := newHarness(t).store, testContext(t)
		if _, err := s.Get(ctx, "never-written"); !errors.Is(err, kvstore.ErrNotFound) {
			t.Errorf("Get missing: %v, want ErrNotFound", err)
		}
		if _, err := s.Get(ctx, "bad id"); !errors.Is(err, kvstore.ErrInvalidID) {
			t.Errorf("Get invalid id: %v, want ErrInvalidID", err)
		}
		if _, err := s.Create(ctx, newTask("a..b")); !errors.Is(err, kvstore.ErrInvalidID) {
			t.Errorf("Create invalid id: %v, want ErrInvalidID", err)
		}
	})

	t.Run("GetMany", func(t *testing.T) {
		t.Parallel()
		s, ctx := newHarness(t).store, testContext(t)
		want := map[string]uint64{}
		var ids []string
		for i := range 300 { // more than one batch
			id := fmt.Sprintf("many-%d", i)
			ids = append(ids, id)
			want[id] = mustCreate(t, s, newTask(id)).Revision
		}
		gone := mustCreate(t, s, newTask("many-gone"))
		if err := s.Delete(ctx, "many-gone", gone.Revision); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetMany(ctx, append(ids, "many-gone", "many-never", "bad id"))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("GetMany returned %d records, want %d (deleted, missing and invalid ids left out)", len(got), len(want))
		}
		for _, e := range got {
			if rev, ok := want[e.Task.ID]; !ok || rev != e.Revision || !reflect.DeepEqual(e.Task, *newTask(e.Task.ID)) {
				t.Fatalf("GetMany: %s at %d, want revision %d", e.Task.ID, e.Revision, rev)
			}
		}
	})

	t.Run("Async", func(t *testing.T) {
		t.Parallel()
		s, ctx := newHarness(t).store, testContext(t)
		task := newTask("async-1")
		e, err := createAsync(ctx, s, task)
		if err != nil || e.Revision == 0 || !reflect.DeepEqual(e.Task, *task) {
			t.Fatalf("CreateAsync: %v, %+v", err, e)
		}
		other := newTask("async-1")
		other.Payload = []byte("other")
		if e2, err := createAsync(ctx, s, other); !errors.Is(err, kvstore.ErrExists) || e2.Revision != e.Revision ||
			!reflect.DeepEqual(e2.Task, *task) {
			t.Fatalf("CreateAsync existing: %v, revision %d, want ErrExists and the record at %d", err, e2.Revision, e.Revision)
		}
		rev, err := updateAsync(ctx, s, task, e.Revision)
		if err != nil || rev <= e.Revision {
			t.Fatalf("UpdateAsync: %v, revision %d", err, rev)
		}
		if _, err := updateAsync(ctx, s, task, e.Revision); !errors.Is(err, kvstore.ErrConflict) {
			t.Fatalf("stale UpdateAsync: %v, want ErrConflict", err)
		}
		if err := deleteAsync(ctx, s, "async-1", e.Revision); !errors.Is(err, kvstore.ErrConflict) {
			t.Fatalf("stale DeleteAsync: %v, want ErrConflict", err)
		}
		if err := deleteAsync(ctx, s, "async-1", rev); err != nil {
			t.Fatalf("DeleteAsync: %v", err)
		}
		if _, err := s.Get(ctx, "async-1"); !errors.Is(err, kvstore.ErrNotFound) {
			t.Fatalf("Get after DeleteAsync: %v", err)
		}
		if e3, err := createAsync(ctx, s, task); err != nil || e3.Revision <= rev {
			t.Fatalf("CreateAsync after delete: %v, revision %d", err, e3.Revision)
		}
		if _, err := createAsync(ctx, s, newTask("bad id")); !errors.Is(err, kvstore.ErrInvalidID) {
			t.Fatalf("CreateAsync invalid id: %v", err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := updateAsync(cctx, s, task, rev); !errors.Is(err, context.Canceled) {
			t.Fatalf("UpdateAsync with a cancelled context: %v, want context.Canceled", err)
		}
	})

	t.Run("AsyncPipelined", func(t *testing.T) {
		t.Parallel()
		s, ctx := newHarness(t).store, testContext(t)
		const n = 300
		tasks := make([]*kvstore.Task, n)
		revs := make([]uint64, n)
		var wg sync.WaitGroup
		var calls atomic.Int64
		errs := make([]error, n)
		for i := range n {
			tasks[i] = newTask(fmt.Sprintf("pipe-%d", i))
			wg.Add(1)
			s.CreateAsync(ctx, tasks[i], func(e kvstore.Entry, err error) {
				calls.Add(1)
				revs[i], errs[i] = e.Revision, err
				wg.Done()
			})
		}
		waitGroup(t, &wg)
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("CreateAsync %d: %v", i, errs[i])
			}
		}
		for i := range n {
			tasks[i].Attempt = 1
			wg.Add(1)
			// Every other update names a stale revision.
			rev := revs[i]
			if i%2 == 1 {
				rev--
			}
			s.UpdateAsync(ctx, tasks[i], rev, func(r uint64, err error) {
				calls.Add(1)
				revs[i], errs[i] = r, err
				wg.Done()
			})
		}
		waitGroup(t, &wg)
		for i := range n {
			if ok := i%2 == 0; ok && errs[i] != nil || !ok && !errors.Is(errs[i], kvstore.ErrConflict) {
				t.Fatalf("UpdateAsync %d: %v", i, errs[i])
			}
		}
		if c := calls.Load(); c != 2*n {
			t.Fatalf("done called %d times for %d ops", c, 2*n)
		}
	})

	t.Run("CASRace", func(t *testing.T) {
		t.Parallel()
		s, ctx := newHarness(t).store, testContext(t)
		e := mustCreate(t, s, newTask("race-1"))
		const writers = 8
		errs := make([]error, writers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() {
				task := newTask("race-1")
				task.Owner = fmt.Sprintf("writer-%d", i)
				<-start
				_, errs[i] = s.Update(ctx, task, e.Revision)
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner < 0:
				winner = i
			case err == nil:
				t.Fatalf("writers %d and %d both won", winner, i)
			case !errors.Is(err, kvstore.ErrConflict):
				t.Fatalf("writer %d: %v, want ErrConflict", i, err)
			}
		}
		if winner < 0 {
			t.Fatal("no writer won")
		}
		if got := mustGet(t, s, "race-1"); got.Task.Owner != fmt.Sprintf("writer-%d", winner) {
			t.Fatalf("record owner %q, winner was %d", got.Task.Owner, winner)
		}
	})

	t.Run("CreateRace", func(t *testing.T) {
		t.Parallel()
		s, ctx := newHarness(t).store, testContext(t)
		const creators = 8
		entries := make([]kvstore.Entry, creators)
		errs := make([]error, creators)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range creators {
			task := newTask("create-race-1")
			task.Owner = fmt.Sprintf("creator-%d", i)
			wg.Go(func() {
				<-start
				if i%2 == 0 {
					entries[i], errs[i] = s.Create(ctx, task)
				} else {
					entries[i], errs[i] = createAsync(ctx, s, task)
				}
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			if err == nil {
				if winner >= 0 {
					t.Fatalf("creators %d and %d both won", winner, i)
				}
				winner = i
			}
		}
		if winner < 0 {
			t.Fatalf("no creator won: %v", errs)
		}
		for i, err := range errs {
			if i != winner && (!errors.Is(err, kvstore.ErrExists) || entries[i].Revision != entries[winner].Revision ||
				entries[i].Task.Owner != entries[winner].Task.Owner) {
				t.Fatalf("creator %d: %v, %+v; want ErrExists and the winner's record", i, err, entries[i])
			}
		}
	})

	t.Run("Watch", func(t *testing.T) {
		t.Parallel()
		s, ctx := newHarness(t).store, testContext(t)
		a := mustCreate(t, s, newTask("w-a"))
		b := mustCreate(t, s, newTask("w-b"))
		gone := mustCreate(t, s, newTask("w-gone"))
		if err := s.Delete(ctx, "w-gone", gone.Revision); err != nil {
			t.Fatal(err)
		}
		w, err := s.Watch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer stopWatch(t, w)
		initial := map[string]uint64{}
		for e := nextEvent(t, w); e.Kind != kvstore.EventInitDone; e = nextEvent(t, w) {
			if e.Kind != kvstore.EventPut || e.Entry.Revision != e.Revision || e.Entry.Task.ID != e.ID {
				t.Fatalf("initial event %+v", e)
			}
			// An initial value may be partial (JetStore: the state without the payload) or whole
			// (MemStore); either way the rest is the record's.
			want := mustGet(t, s, e.ID)
			if e.Entry.Partial {
				want.Task.Payload, want.Partial = nil, true
			}
			if !reflect.DeepEqual(e.Entry, want) {
				t.Fatalf("initial value %+v, want %+v", e.Entry, want)
			}
			initial[e.ID] = e.Revision
		}
		if want := map[string]uint64{"w-a": a.Revision, "w-b": b.Revision}; !reflect.DeepEqual(initial, want) {
			t.Fatalf("initial values %v, want %v", initial, want)
		}
		c := mustCreate(t, s, newTask("w-c"))
		if e := expectEvent(t, w, kvstore.EventPut, "w-c", c.Revision); e.Entry.Partial || !reflect.DeepEqual(e.Entry, c) {
			t.Fatalf("live event %+v, want the whole record %+v", e.Entry, c)
		}
		task := newTask("w-a")
		task.Status = kvstore.StatusRunning
		rev, err := s.Update(ctx, task, a.Revision)
		if err != nil {
			t.Fatal(err)
		}
		if e := expectEvent(t, w, kvstore.EventPut, "w-a", rev); e.Entry.Task.Status != kvstore.StatusRunning {
			t.Fatalf("update event status %s", e.Entry.Task.Status)
		}
		if err := s.Delete(ctx, "w-b", b.Revision); err != nil {
			t.Fatal(err)
		}
		del := expectEvent(t, w, kvstore.EventDelete, "w-b", 0)
		if del.Revision <= rev {
			t.Fatalf("delete event revision %d, want after %d", del.Revision, rev)
		}
	})

	t.Run("WatchEmptyAndStop", func(t *testing.T) {
		t.Parallel()
		s, ctx := newHarness(t).store, testContext(t)
		w, err := s.Watch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		expectEvent(t, w, kvstore.EventInitDone, "", 0)
		stopWatch(t, w)
		stopWatch(t, w) // idempotent
		if _, ok := <-w.Events(); ok {
			t.Fatal("Events open after Stop")
		}
		// The end of the context also ends a watch.
		wctx, cancel := context.WithCancel(ctx)
		w2, err := s.Watch(wctx)
		if err != nil {
			t.Fatal(err)
		}
		expectEvent(t, w2, kvstore.EventInitDone, "", 0)
		cancel()
		for range w2.Events() { // closed within waitTimeout, or the test times out
		}
		stopWatch(t, w2)
		if _, err := s.Watch(ctx, s.Partitions()); err == nil {
			t.Fatal("Watch of an out-of-range partition succeeded")
		}
	})

	t.Run("WatchPartitions", func(t *testing.T) {
		t.Parallel()
		s, ctx := newHarness(t).store, testContext(t)
		n := s.Partitions()
		byPart := map[int][]string{}
		for i := 0; i < 8*n; i++ {
			id := fmt.Sprintf("part-%d", i)
			byPart[kvstore.Partition(id, n)] = append(byPart[kvstore.Partition(id, n)], id)
		}
		p, q := 0, 1
		if len(byPart[p]) < 2 || len(byPart[q]) < 2 {
			t.Fatalf("ids do not spread: %v", byPart)
		}
		// Half of each partition's ids exist before the watch, half are written after.
		for _, part := range []int{p, q, 2 % n} {
			ids := byPart[part]
			for _, id := range ids[:len(ids)/2] {
				mustCreate(t, s, newTask(id))
			}
		}
		w, err := s.Watch(ctx, p, q)
		if err != nil {
			t.Fatal(err)
		}
		defer stopWatch(t, w)
		want := map[string]bool{}
		for _, id := range slices.Concat(byPart[p][:len(byPart[p])/2], byPart[q][:len(byPart[q])/2]) {
			want[id] = true
		}
		seen := map[string]bool{}
		for e := nextEvent(t, w); e.Kind != kvstore.EventInitDone; e = nextEvent(t, w) {
			seen[e.ID] = true
		}
		if !reflect.DeepEqual(seen, want) {
			t.Fatalf("initial ids %v, want %v", seen, want)
		}
		// Live: write the rest of every partition; the watch must see exactly p's and q's, and the
		// marker written last in q tells when it has seen them all.
		clear(want)
		clear(seen)
		for part, ids := range byPart {
			if part == q {
				continue
			}
			for _, id := range ids[len(ids)/2:] {
				mustCreate(t, s, newTask(id))
				if part == p {
					want[id] = true
				}
			}
		}
		for _, id := range byPart[q][len(byPart[q])/2:] {
			mustCreate(t, s, newTask(id))
			want[id] = true
		}
		last := byPart[q][len(byPart[q])-1]
		for !seen[last] {
			e := nextEvent(t, w)
			if e.Kind != kvstore.EventPut {
				t.Fatalf("live event %+v", e)
			}
			seen[e.ID] = true
		}
		if !reflect.DeepEqual(seen, want) {
			t.Fatalf("live ids %v, want %v", seen, want)
		}
	})

	t.Run("Corrupt", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		s, ctx := h.store, testContext(t)
		n := s.Partitions()
		w, err := s.Watch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer stopWatch(t, w)
		expectEvent(t, w, kvstore.EventInitDone, "", 0)
		h.putRaw(t, kvstore.Key("bad-1", n), []byte("\x00garbage, not a record"))
		e := expectEvent(t, w, kvstore.EventError, "bad-1", 0)
		if !errors.Is(e.Err, kvstore.ErrCorrupt) || e.Revision == 0 {
			t.Fatalf("error event %+v, want ErrCorrupt with a revision", e)
		}
		if _, err := s.Get(ctx, "bad-1"); !errors.Is(err, kvstore.ErrCorrupt) {
			t.Fatalf("Get corrupt: %v, want ErrCorrupt", err)
		}
		if _, err := s.Create(ctx, newTask("bad-1")); !errors.Is(err, kvstore.ErrExists) || !errors.Is(err, kvstore.ErrCorrupt) {
			t.Fatalf("Create over a corrupt record: %v, want ErrExists and ErrCorrupt", err)
		}
		// A valid record of another task under this key is corrupt too.
		other, err := kvstore.EncodeTask(newTask("someone-else"))
		if err != nil {
			t.Fatal(err)
		}
		h.putRaw(t, kvstore.Key("bad-2", n), other)
		if e := expectEvent(t, w, kvstore.EventError, "bad-2", 0); !errors.Is(e.Err, kvstore.ErrCorrupt) {
			t.Fatalf("error event %+v", e)
		}
		// The watch goes on.
		c := mustCreate(t, s, newTask("good-1"))
		expectEvent(t, w, kvstore.EventPut, "good-1", c.Revision)
	})

	testRetention(t, newHarness)
}

func newTask(id string) *kvstore.Task {
	return &kvstore.Task{
		ID: id, BizType: "order.timeout", Payload: []byte("payload of " + id),
		Header: map[string][]string{"X-Trace": {"t-1"}},
		Status: kvstore.StatusWaiting, DueAt: 1767225600000, MaxRetry: 3, AckWait: 30 * time.Second,
		Backoff:   []time.Duration{10 * time.Second, 30 * time.Second},
		CreatedAt: 1767225500000, UpdatedAt: 1767225500000,
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustCreate(t *testing.T, s kvstore.Store, task *kvstore.Task) kvstore.Entry {
	t.Helper()
	e, err := s.Create(testContext(t), task)
	if err != nil {
		t.Fatalf("Create %s: %v", task.ID, err)
	}
	return e
}

func mustGet(t *testing.T, s kvstore.Store, id string) kvstore.Entry {
	t.Helper()
	e, err := s.Get(testContext(t), id)
	if err != nil {
		t.Fatalf("Get %s: %v", id, err)
	}
	return e
}

// createAsync, updateAsync and deleteAsync run one async op and return its outcome; they fail
// the caller (by timing out) if done is not called.
func createAsync(ctx context.Context, s kvstore.Store, task *kvstore.Task) (kvstore.Entry, error) {
	type res struct {
		e   kvstore.Entry
		err error
	}
	ch := make(chan res, 1)
	s.CreateAsync(ctx, task, func(e kvstore.Entry, err error) { ch <- res{e, err} })
	return awaitResult(ch, func(r res) (kvstore.Entry, error) { return r.e, r.err })
}

func updateAsync(ctx context.Context, s kvstore.Store, task *kvstore.Task, rev uint64) (uint64, error) {
	type res struct {
		rev uint64
		err error
	}
	ch := make(chan res, 1)
	s.UpdateAsync(ctx, task, rev, func(r uint64, err error) { ch <- res{r, err} })
	return awaitResult(ch, func(r res) (uint64, error) { return r.rev, r.err })
}

func deleteAsync(ctx context.Context, s kvstore.Store, id string, rev uint64) error {
	ch := make(chan error, 1)
	s.DeleteAsync(ctx, id, rev, func(err error) { ch <- err })
	_, err := awaitResult(ch, func(err error) (struct{}, error) { return struct{}{}, err })
	return err
}

var errNoDone = errors.New("test: done not called in time")

func awaitResult[R, V any](ch <-chan R, get func(R) (V, error)) (V, error) {
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		return get(r)
	case <-timer.C:
		var zero V
		return zero, errNoDone
	}
}

func waitGroup(t *testing.T, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		t.Fatalf("async ops not done within %v", waitTimeout)
	}
}

func nextEvent(t *testing.T, w kvstore.Watcher) kvstore.Event {
	t.Helper()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	select {
	case e, ok := <-w.Events():
		if !ok {
			t.Fatal("watch events closed")
		}
		return e
	case <-timer.C:
		t.Fatalf("no watch event within %v", waitTimeout)
	}
	panic("unreachable")
}

// expectEvent reads the next event and checks its kind, id (if not empty) and revision (if not 0).
func expectEvent(t *testing.T, w kvstore.Watcher, kind kvstore.EventKind, id string, rev uint64) kvstore.Event {
	t.Helper()
	e := nextEvent(t, w)
	if e.Kind != kind || id != "" && e.ID != id || rev != 0 && e.Revision != rev {
		t.Fatalf("event %+v, want kind %d id %q revision %d", e, kind, id, rev)
	}
	return e
}

func stopWatch(t *testing.T, w kvstore.Watcher) {
	t.Helper()
	if err := w.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
}
