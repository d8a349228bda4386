package kvstore_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// A watch whose start nobody answers (here the server is gone and the client waits to reconnect)
// fails at the store's timeout when its context has no deadline, instead of waiting for ever.
func TestJetStoreWatchStartDeadline(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	s := openJetStore(t, js, kvstore.Config{Bucket: newBucketName(), Partitions: 4, Timeout: 200 * time.Millisecond})
	srv.Shutdown()
	for _, ps := range [][]int{nil, {1, 2}} {
		done := make(chan error, 1)
		go func() {
			w, err := s.Watch(context.Background(), ps...)
			if err == nil {
				w.Stop()
			}
			done <- err
		}()
		timer := time.NewTimer(waitTimeout)
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Watch(%v) with no server: %v, want a deadline error", ps, err)
			}
		case <-timer.C:
			t.Fatalf("Watch(%v) with no server did not return within %v", ps, waitTimeout)
		}
		timer.Stop()
	}
}

// A reader that is away while 20,000 records are delivered holds up the watch at its buffer, and
// then gets every event exactly once and in order: the queue waits for it instead of growing.
func TestJetStoreWatchBackPressure(t *testing.T) {
	t.Parallel()
	const buffer, n = 64, 20_000
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	s := openJetStore(t, js, kvstore.Config{Bucket: newBucketName(), Partitions: 4, WatchBuffer: buffer})
	// Longer than testContext: 20,000 writes and events take a while under the race detector.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	createMany(t, s, "before", n/2)
	w, err := s.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stopWatch(t, w)
	// The reader is away: the queue fills to its bound, and the records written now wait too.
	checkFor(t, func() bool { return kvstore.WatchHighWaterForTest(w) == buffer }, "the watch queue filled")
	createMany(t, s, "after", n/2)

	seen := make(map[string]bool, n)
	var last uint64
	initDone := false
	for len(seen) < n {
		e := nextEvent(t, w)
		switch {
		case e.Kind == kvstore.EventInitDone && !initDone:
			if len(seen) != n/2 {
				t.Fatalf("InitDone after %d records, want the %d written before the watch", len(seen), n/2)
			}
			initDone = true
			continue
		case e.Kind != kvstore.EventPut:
			t.Fatalf("event %+v", e)
		case seen[e.ID]:
			t.Fatalf("%s delivered twice", e.ID)
		case e.Revision <= last:
			t.Fatalf("%s at revision %d after %d: out of order", e.ID, e.Revision, last)
		case strings.HasPrefix(e.ID, "before-") == initDone:
			t.Fatalf("%s delivered with initDone %v", e.ID, initDone)
		}
		seen[e.ID], last = true, e.Revision
	}
	if hw := kvstore.WatchHighWaterForTest(w); hw > buffer {
		t.Fatalf("the watch queue held %d events, the bound is %d", hw, buffer)
	}
}

// createMany creates n tasks <prefix>-<i>, pipelined.
func createMany(t *testing.T, s kvstore.Store, prefix string, n int) {
	t.Helper()
	ctx := testContext(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for i := range n {
		wg.Add(1)
		s.CreateAsync(ctx, newTask(fmt.Sprintf("%s-%d", prefix, i)), func(_ kvstore.Entry, err error) {
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			wg.Done()
		})
	}
	waitGroup(t, &wg)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// The last message the leader reports when a watch starts can be gone by the time its consumer
// starts (a marker expired, a record retired and its marker expired): the watch must still end
// its initial values, not wait for a revision that no longer exists.
func TestJetStoreWatchTargetGone(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	s := openJetStore(t, js, kvstore.Config{Bucket: newBucketName(), Partitions: 4})
	ctx := testContext(t)
	a := mustCreate(t, s, newTask("stays"))
	mustCreate(t, s, newTask("vanishes"))
	str, err := js.Stream(ctx, "KV_"+s.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	kvstore.SetWatchTargetHookForTest(s, func() {
		// As an expiry does: the key's message goes, leaving nothing.
		subj := "$KV." + s.Bucket() + "." + kvstore.Key("vanishes", s.Partitions())
		if err := str.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
			t.Error(err)
		}
	})
	for _, ps := range [][]int{nil, {kvstore.Partition("stays", 4), kvstore.Partition("vanishes", 4)}} {
		w, err := s.Watch(ctx, ps...)
		if err != nil {
			t.Fatal(err)
		}
		expectEvent(t, w, kvstore.EventPut, "stays", a.Revision)
		expectEvent(t, w, kvstore.EventInitDone, "", 0)
		stopWatch(t, w)
	}
}

// A record deleted after the watch read the leader's last revision but before its consumer
// started comes as a delete before EventInitDone: a reader that holds the record from an earlier
// watch (the bridge when it watches again) must drop it. Both ways of loading.
func TestJetStoreWatchDeleteDuringStart(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	for _, headersOnly := range []bool{false, true} {
		s := openJetStore(t, js, kvstore.Config{Bucket: newBucketName(), Partitions: 4})
		kvstore.SetWatchLoadForTest(s, headersOnly)
		ctx := testContext(t)
		a := mustCreate(t, s, newTask("a"))
		mustCreate(t, s, newTask("b"))
		var once sync.Once
		kvstore.SetWatchTargetHookForTest(s, func() {
			once.Do(func() {
				if err := s.Delete(ctx, "a", a.Revision); err != nil {
					t.Error(err)
				}
			})
		})
		w, err := s.Watch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]kvstore.EventKind{} // in key order, not revision order: collect them
		for ev := nextEvent(t, w); ev.Kind != kvstore.EventInitDone; ev = nextEvent(t, w) {
			got[ev.ID] = ev.Kind
		}
		stopWatch(t, w)
		if want := map[string]kvstore.EventKind{"a": kvstore.EventDelete, "b": kvstore.EventPut}; !reflect.DeepEqual(got, want) {
			t.Errorf("headers-only %v: initial events %v, want %v", headersOnly, got, want)
		}
	}
}
