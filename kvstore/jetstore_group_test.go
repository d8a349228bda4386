package kvstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// groupedConfig groups up to 1000 writes; the tests hold the grouper's sends
// (kvstore.HoldSendsForTest) while they start the writes that should go out together, so what
// goes into one batch does not depend on the machine's speed.
func groupedConfig() kvstore.Config {
	return kvstore.Config{Bucket: newBucketName(), BatchMax: 1000}
}

// streamState is the bucket stream's message count and last sequence, from its leader.
func streamState(t *testing.T, js jetstream.JetStream, s *kvstore.JetStore) (msgs, last uint64) {
	t.Helper()
	str, err := js.Stream(testContext(t), "KV_"+s.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	info, err := str.Info(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs, info.State.LastSeq
}

// outcome is what one async write reported.
type outcome struct {
	rev uint64
	err error
}

// startUpdates starts an UpdateAsync per task at the given revision; the outcomes come on the
// returned channels, one per task, in the tasks' order.
func startUpdates(ctx context.Context, s kvstore.Store, tasks []*kvstore.Task, revs []uint64) []chan outcome {
	chs := make([]chan outcome, len(tasks))
	for i, task := range tasks {
		chs[i] = make(chan outcome, 2) // room for a second done, which the test reports
		s.UpdateAsync(ctx, task, revs[i], func(rev uint64, err error) { chs[i] <- outcome{rev, err} })
	}
	return chs
}

func await(t *testing.T, ch chan outcome) outcome {
	t.Helper()
	o, err := awaitResult(ch, func(o outcome) (outcome, error) { return o, nil })
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func running(id, owner string) *kvstore.Task {
	task := newTask(id)
	task.Status, task.Attempt, task.Owner = kvstore.StatusRunning, 1, owner
	return task
}

func TestJetStoreGroupingConfig(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	allowsAtomic := func(s *kvstore.JetStore) bool {
		t.Helper()
		str, err := js.Stream(testContext(t), "KV_"+s.Bucket())
		if err != nil {
			t.Fatal(err)
		}
		return str.CachedInfo().Config.AllowAtomicPublish
	}
	t.Run("NewBucket", func(t *testing.T) {
		s := openJetStore(t, js, kvstore.Config{Bucket: newBucketName(), BatchMax: 1000})
		if !s.Grouping() || !allowsAtomic(s) {
			t.Fatalf("grouping %v, stream allows atomic publish %v; want both", s.Grouping(), allowsAtomic(s))
		}
	})
	t.Run("ExistingBucketGainsAtomicPublish", func(t *testing.T) {
		// A bucket from before grouping: its stream has no AllowAtomicPublish.
		bucket := newBucketName()
		openJetStore(t, js, kvstore.Config{Bucket: bucket, BatchMax: 1})
		str, err := js.Stream(testContext(t), "KV_"+bucket)
		if err != nil {
			t.Fatal(err)
		}
		if str.CachedInfo().Config.AllowAtomicPublish {
			t.Fatal("a store that does not group turned atomic publish on")
		}
		s := openJetStore(t, js, kvstore.Config{Bucket: bucket, BatchMax: 1000})
		if !s.Grouping() || !allowsAtomic(s) {
			t.Fatalf("grouping %v, stream allows atomic publish %v; want both", s.Grouping(), allowsAtomic(s))
		}
	})
	t.Run("Off", func(t *testing.T) {
		s := openJetStore(t, js, kvstore.Config{Bucket: newBucketName(), BatchMax: 1})
		e := mustCreate(t, s, newTask("single"))
		if _, err := updateAsync(testContext(t), s, running("single", "r1"), e.Revision); err != nil {
			t.Fatal(err)
		}
		if st := s.WriteStats(); s.Grouping() || st.Batches != 0 || st.Singles != 1 {
			t.Fatalf("BatchMax 1: grouping %v, %+v; want no batches, one single write", s.Grouping(), st)
		}
	})
	t.Run("Invalid", func(t *testing.T) {
		for _, cfg := range []kvstore.Config{{BatchMax: 1001}, {BatchMax: -1}} {
			if _, err := kvstore.OpenJetStore(testContext(t), js, cfg); err == nil {
				t.Errorf("OpenJetStore(%+v) accepted", cfg)
			}
		}
	})
}

// Many concurrent async writes go out in fewer publishes than writes, and each reports the
// revision it really got.
func TestJetStoreGroupedWrites(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	cfg := groupedConfig()
	cfg.BatchMax = 128
	s := openJetStore(t, js, cfg)
	ctx := testContext(t)
	const n = 300 // three batches of 128
	tasks := make([]*kvstore.Task, n)
	revs := make([]uint64, n)
	for i := range n {
		id := fmt.Sprintf("many-%d", i)
		revs[i] = mustCreate(t, s, newTask(id)).Revision
		tasks[i] = running(id, "r1")
	}
	_, lastBefore := streamState(t, js, s)
	before := s.WriteStats()
	release := kvstore.HoldSendsForTest(s)
	chs := startUpdates(ctx, s, tasks, revs)
	release()
	for i, ch := range chs {
		o := await(t, ch)
		if o.err != nil {
			t.Fatalf("update %s: %v", tasks[i].ID, o.err)
		}
		if got := mustGet(t, s, tasks[i].ID); got.Revision != o.rev || got.Task.Status != kvstore.StatusRunning {
			t.Fatalf("update %s reported revision %d; the record is at %d, %s", tasks[i].ID, o.rev, got.Revision, got.Task.Status)
		}
	}
	msgs, last := streamState(t, js, s)
	if msgs != n || last != lastBefore+n {
		t.Fatalf("stream: %d messages, last sequence %d; want %d and %d (each write stored once)", msgs, last, n, lastBefore+n)
	}
	st := s.WriteStats()
	batches, batched, singles := st.Batches-before.Batches, st.BatchedWrites-before.BatchedWrites, st.Singles-before.Singles
	if batched+singles != n || batches != 3 || singles != 0 {
		t.Fatalf("%d writes went out as %d batches of %d writes in all and %d single writes; want 3 batches (128, 128, 44) and no single write",
			n, batches, batched, singles)
	}
	t.Logf("%d writes: %d batches, %d single writes", n, batches, singles)
}

// A batch refused for one stale revision stored nothing; its other writes go out again one by one
// and land exactly once, and the stale one reports ErrConflict. The batch also holds a create of a
// new key, a create over a delete marker (refused in a batch too) and a delete.
func TestJetStoreGroupedStaleRevision(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	s := openJetStore(t, js, groupedConfig())
	ctx := testContext(t)
	const n = 20
	tasks := make([]*kvstore.Task, n)
	revs := make([]uint64, n)
	for i := range n {
		id := fmt.Sprintf("stale-%d", i)
		revs[i] = mustCreate(t, s, newTask(id)).Revision
		tasks[i] = running(id, "r1")
	}
	const stale = 7
	revs[stale]-- // the revision before its create: stale
	gone := mustCreate(t, s, newTask("deleted"))
	if err := s.Delete(ctx, "deleted", gone.Revision); err != nil {
		t.Fatal(err)
	}
	doomed := mustCreate(t, s, newTask("doomed"))
	_, lastBefore := streamState(t, js, s)
	before := s.WriteStats()

	release := kvstore.HoldSendsForTest(s) // all of them in one batch
	chs := startUpdates(ctx, s, tasks, revs)
	created, recreated := make(chan outcome, 2), make(chan outcome, 2)
	s.CreateAsync(ctx, newTask("fresh"), func(e kvstore.Entry, err error) { created <- outcome{e.Revision, err} })
	s.CreateAsync(ctx, newTask("deleted"), func(e kvstore.Entry, err error) { recreated <- outcome{e.Revision, err} })
	deleted := make(chan outcome, 2)
	s.DeleteAsync(ctx, "doomed", doomed.Revision, func(err error) { deleted <- outcome{0, err} })
	release()

	for i, ch := range chs {
		o := await(t, ch)
		switch {
		case i == stale:
			if !errors.Is(o.err, kvstore.ErrConflict) {
				t.Errorf("update %s at a stale revision: %d, %v; want ErrConflict", tasks[i].ID, o.rev, o.err)
			}
			if got := mustGet(t, s, tasks[i].ID); got.Revision != revs[i]+1 || got.Task.Status != kvstore.StatusWaiting {
				t.Errorf("%s after the refused update: revision %d, %s", tasks[i].ID, got.Revision, got.Task.Status)
			}
		case o.err != nil:
			t.Errorf("update %s in the refused batch: %v", tasks[i].ID, o.err)
		default:
			if got := mustGet(t, s, tasks[i].ID); got.Revision != o.rev || got.Task.Status != kvstore.StatusRunning {
				t.Errorf("update %s reported revision %d; the record is at %d, %s", tasks[i].ID, o.rev, got.Revision, got.Task.Status)
			}
		}
	}
	for name, ch := range map[string]chan outcome{"fresh": created, "deleted": recreated} {
		if o := await(t, ch); o.err != nil {
			t.Errorf("create %s: %v", name, o.err)
		} else if got := mustGet(t, s, name); got.Revision != o.rev {
			t.Errorf("create %s reported revision %d; the record is at %d", name, o.rev, got.Revision)
		}
	}
	if o := await(t, deleted); o.err != nil {
		t.Errorf("delete: %v", o.err)
	} else if _, err := s.Get(ctx, "doomed"); !errors.Is(err, kvstore.ErrNotFound) {
		t.Errorf("doomed after its delete: %v", err)
	}
	// Exactly once: n-1 updates, two creates and a purge marker, nothing stored twice.
	if _, last := streamState(t, js, s); last != lastBefore+n-1+3 {
		t.Errorf("stream last sequence %d, want %d: %d writes stored", last, lastBefore+n-1+3, last-lastBefore)
	}
	for _, ch := range append(chs, created, recreated, deleted) {
		if len(ch) != 0 {
			t.Fatal("done called twice")
		}
	}
	if st := s.WriteStats(); st.Rejected == before.Rejected {
		t.Fatalf("no batch was refused (%+v): the test did not test the fallback", st)
	}
}

// Two writes to one key in flight at once, among writes to other keys: the second waits for the
// next batch; exactly one of the two lands, the other is ErrConflict, and the others land.
func TestJetStoreGroupedSameKey(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	s := openJetStore(t, js, groupedConfig())
	ctx := testContext(t)
	const n = 10
	for round := range 3 {
		tasks := make([]*kvstore.Task, 0, n+1)
		revs := make([]uint64, 0, n+1)
		for i := range n {
			id := fmt.Sprintf("same-%d-%d", round, i)
			tasks = append(tasks, running(id, "r1"))
			revs = append(revs, mustCreate(t, s, newTask(id)).Revision)
		}
		// The same key again, by another owner, at the same revision.
		tasks = append(tasks, running(tasks[0].ID, "r2"))
		revs = append(revs, revs[0])
		_, lastBefore := streamState(t, js, s)
		release := kvstore.HoldSendsForTest(s) // one batch, and the second write to the key after it
		chs := startUpdates(ctx, s, tasks, revs)
		release()
		var won []int
		for i, ch := range chs {
			o := await(t, ch)
			switch {
			case o.err == nil:
				if i == 0 || i == n {
					won = append(won, i)
				}
			case (i == 0 || i == n) && errors.Is(o.err, kvstore.ErrConflict):
			default:
				t.Fatalf("update %d of %s: %v", i, tasks[i].ID, o.err)
			}
		}
		if len(won) != 1 {
			t.Fatalf("round %d: %d of the two writes to %s landed, want one", round, len(won), tasks[0].ID)
		}
		if got := mustGet(t, s, tasks[0].ID); got.Task.Owner != tasks[won[0]].Owner {
			t.Fatalf("%s is owned by %q; the write that landed was %q's", tasks[0].ID, got.Task.Owner, tasks[won[0]].Owner)
		}
		if _, last := streamState(t, js, s); last != lastBefore+n {
			t.Fatalf("round %d: %d writes stored, want %d", round, last-lastBefore, n)
		}
	}
}

// A batch whose commit has no answer may or may not have landed: each of its writes reports an
// error that is not a conflict (outcome unknown), never success; whatever reported success is
// there after the restart. Here the server goes down just before the batch is sent: the client
// holds the batch in its reconnect buffer, the commit's deadline passes, and the batch may still
// land once the client reconnects to the restarted server. (Going down between a batch's messages
// and its commit would leave the server's staging store of the batch running for its 10s batch
// timeout, a goroutine the leak check sees.)
func TestJetStoreGroupedUnknownOutcome(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	cfg := groupedConfig()
	s := openJetStore(t, js, cfg)
	const n = 20
	tasks := make([]*kvstore.Task, n)
	revs := make([]uint64, n)
	for i := range n {
		id := fmt.Sprintf("unknown-%d", i)
		revs[i] = mustCreate(t, s, newTask(id)).Revision
		tasks[i] = running(id, "r1")
	}
	var once sync.Once
	var first []string // the subjects of the batch sent as the server went down
	kvstore.SetBatchSendHookForTest(s, func(subjects []string) {
		once.Do(func() { first = subjects; srv.Shutdown() })
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	release := kvstore.HoldSendsForTest(s)
	chs := startUpdates(ctx, s, tasks, revs)
	release()
	got := make([]outcome, n)
	var failed int
	for i, ch := range chs {
		got[i] = await(t, ch)
		if got[i].err != nil {
			failed++
			if errors.Is(got[i].err, kvstore.ErrConflict) || errors.Is(got[i].err, kvstore.ErrNotFound) {
				t.Errorf("update %s, commit unanswered: %v; want an unknown outcome, not a refusal", tasks[i].ID, got[i].err)
			}
		}
	}
	if failed == 0 {
		t.Fatal("every write reported success, though the server went down before their batch was sent")
	}
	if len(first) == 0 {
		t.Fatal("no batch was sent")
	}
	inFirst := map[string]bool{}
	for _, subj := range first {
		inFirst[strings.TrimPrefix(subj, "$KV."+s.Bucket()+".")] = true
	}
	for i := range n {
		if inFirst[kvstore.Key(tasks[i].ID, s.Partitions())] && got[i].err == nil {
			t.Errorf("update %s, in the batch sent as the server went down, reported success", tasks[i].ID)
		}
	}
	t.Logf("%d of %d writes reported an unknown outcome; e.g. %v", failed, n, got[0].err)

	srv.Restart(t)
	s2 := openJetStore(t, newJS(t, srv.ClientURL()), cfg)
	for i, o := range got {
		rec := mustGet(t, s2, tasks[i].ID)
		if o.err == nil && (rec.Revision != o.rev || rec.Task.Status != kvstore.StatusRunning) {
			t.Errorf("update %s reported revision %d; after the restart the record is at %d, %s",
				tasks[i].ID, o.rev, rec.Revision, rec.Task.Status)
		}
	}
}

// On a replicated bucket, a batch of writes right behind the batch of creates of their keys finds
// the keys busy (10164) and is refused whole; its writes go out again one by one, ask again while
// busy, and all land at the revisions their creates got.
func TestJetStoreR3GroupedBusyKeys(t *testing.T) {
	t.Parallel()
	c := natstest.RunCluster(t, 3)
	js := newJS(t, c.ClientURLs())
	const n = 20
	// The writes are held, then flushed at once (a barrier sends whatever waits, room in flight or
	// not): the batch of updates goes out right behind the batch of creates.
	cfg := groupedConfig()
	cfg.Replicas, cfg.BatchMax = 3, n
	s := openJetStore(t, js, cfg)
	ctx := testContext(t)
	for round := range 3 {
		_, last := streamState(t, js, s)
		release := kvstore.HoldSendsForTest(s)
		tasks := make([]*kvstore.Task, n)
		revs := make([]uint64, n)
		created := make([]chan outcome, n)
		for i := range n {
			id := fmt.Sprintf("busy-%d-%d", round, i)
			tasks[i], revs[i] = running(id, "r1"), last+1+uint64(i) // one batch: contiguous revisions
			created[i] = make(chan outcome, 2)
			s.CreateAsync(ctx, newTask(id), func(e kvstore.Entry, err error) { created[i] <- outcome{e.Revision, err} })
		}
		updated := startUpdates(ctx, s, tasks, revs) // the next batch: every key is in the first
		if err := kvstore.WaitSentForTest(ctx, s); err != nil {
			t.Fatal(err)
		}
		release()
		for i := range n {
			if o := await(t, created[i]); o.err != nil || o.rev != revs[i] {
				t.Fatalf("create %s: revision %d, %v; want revision %d", tasks[i].ID, o.rev, o.err, revs[i])
			}
			if o := await(t, updated[i]); o.err != nil {
				t.Errorf("update %s at revision %d right behind its create: %v", tasks[i].ID, revs[i], o.err)
			} else if got := mustGet(t, s, tasks[i].ID); got.Revision != o.rev || got.Task.Status != kvstore.StatusRunning {
				t.Errorf("update %s reported revision %d; the record is at %d, %s", tasks[i].ID, o.rev, got.Revision, got.Task.Status)
			}
		}
		if _, now := streamState(t, js, s); now != last+2*n {
			t.Fatalf("round %d: %d writes stored, want %d", round, now-last, 2*n)
		}
	}
	t.Logf("%+v", s.WriteStats())
}

// Group commit: a write that finds nothing in flight goes out at once on its own, however large
// BatchMax, and writes that wait behind a send in flight go out together.
func TestJetStoreGroupCommit(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	s := openJetStore(t, js, groupedConfig())
	ctx := testContext(t)
	const n = 10
	revs := make([]uint64, n)
	for i := range n {
		revs[i] = mustCreate(t, s, newTask(fmt.Sprintf("gc-%d", i))).Revision
	}
	before := s.WriteStats()
	for i := range n { // one at a time: each finds the room empty
		rev, err := updateAsync(ctx, s, running(fmt.Sprintf("gc-%d", i), "r1"), revs[i])
		if err != nil {
			t.Fatal(err)
		}
		revs[i] = rev
	}
	st := s.WriteStats()
	if st.Singles-before.Singles != n || st.Batches != before.Batches {
		t.Fatalf("%d writes one after another: %+v (before %+v); want %d single writes and no batch", n, st, before, n)
	}
	release := kvstore.HoldSendsForTest(s) // as if a send were in flight
	tasks := make([]*kvstore.Task, n)
	for i := range tasks {
		tasks[i] = running(fmt.Sprintf("gc-%d", i), "r2")
	}
	chs := startUpdates(ctx, s, tasks, revs)
	if got := s.WriteStats(); got.Singles != st.Singles || got.Batches != st.Batches {
		t.Fatalf("writes went out while the room in flight was full: %+v", got)
	}
	release()
	for i, ch := range chs {
		if o := await(t, ch); o.err != nil {
			t.Fatalf("update %s: %v", tasks[i].ID, o.err)
		}
	}
	if got := s.WriteStats(); got.Batches-st.Batches != 1 || got.BatchedWrites-st.BatchedWrites != n || got.Singles != st.Singles {
		t.Fatalf("%d writes that waited behind a send: %+v (before %+v); want them in one batch", n, got, st)
	}
}
