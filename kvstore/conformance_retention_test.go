package kvstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/axbridge/axbridge/kvstore"
)

// testRetention is the part of the conformance suite about TTLs: final records retire by a TTL
// on their final write, markers expire, an id can be used again.
func testRetention(t *testing.T, newHarness func(t *testing.T, opts ...harnessOpt) harness) {
	t.Run("TTLOnFinalWritesOnly", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		s, ctx := h.store, testContext(t)
		retention, marker := h.cfg.retention.String(), h.cfg.markerTTL.String()
		task := newTask("ttl-a")
		e := mustCreate(t, s, task)
		expectLast(t, h, "ttl-a", true, false, "")
		task.Status, task.Attempt = kvstore.StatusRunning, 1
		rev := mustUpdate(t, s, task, e.Revision)
		expectLast(t, h, "ttl-a", true, false, "")
		task.Status, task.FinishedAt = kvstore.StatusSuccess, task.UpdatedAt
		rev, err := updateAsync(ctx, s, task, rev)
		if err != nil {
			t.Fatal(err)
		}
		expectLast(t, h, "ttl-a", true, false, retention)
		// A requeue: live again, and the TTL is gone with the write that replaced the final one.
		task.Status, task.FinishedAt = kvstore.StatusWaiting, 0
		mustUpdate(t, s, task, rev)
		expectLast(t, h, "ttl-a", true, false, "")

		dead := newTask("ttl-b")
		dead.Status = kvstore.StatusDead
		if _, err := createAsync(ctx, s, dead); err != nil {
			t.Fatal(err)
		}
		expectLast(t, h, "ttl-b", true, false, retention)
		cancelled := newTask("ttl-c")
		cancelled.Status = kvstore.StatusCancelled
		c := mustCreate(t, s, cancelled)
		expectLast(t, h, "ttl-c", true, false, retention)
		// Delete's marker expires too.
		if err := s.Delete(ctx, "ttl-c", c.Revision); err != nil {
			t.Fatal(err)
		}
		expectLast(t, h, "ttl-c", true, true, marker)
	})

	t.Run("FinalRecordsRetire", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, withTTLs(time.Second, time.Hour))
		s, ctx := h.store, testContext(t)
		w, err := s.Watch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer stopWatch(t, w)
		expectEvent(t, w, kvstore.EventInitDone, "", 0)

		live := map[string]uint64{"live-w": mustCreate(t, s, newTask("live-w")).Revision}
		expectEvent(t, w, kvstore.EventPut, "live-w", live["live-w"])
		running := newTask("live-r")
		e := mustCreate(t, s, running)
		expectEvent(t, w, kvstore.EventPut, "live-r", e.Revision)
		running.Status, running.Attempt = kvstore.StatusRunning, 1
		live["live-r"] = mustUpdate(t, s, running, e.Revision)
		expectEvent(t, w, kvstore.EventPut, "live-r", live["live-r"])

		finals := map[string]uint64{}
		for id, st := range map[string]kvstore.Status{
			"fin-s": kvstore.StatusSuccess, "fin-d": kvstore.StatusDead, "fin-c": kvstore.StatusCancelled,
		} {
			task := newTask(id)
			e := mustCreate(t, s, task)
			expectEvent(t, w, kvstore.EventPut, id, e.Revision)
			task.Status, task.FinishedAt = st, task.UpdatedAt
			finals[id] = mustUpdate(t, s, task, e.Revision)
			expectEvent(t, w, kvstore.EventPut, id, finals[id])
		}
		awaitRetired(t, h, "fin-s", "fin-d", "fin-c")
		// Running watchers see each retirement as a delete, after the final write.
		for range finals {
			e := nextEvent(t, w)
			if rev, ok := finals[e.ID]; e.Kind != kvstore.EventDelete || !ok || e.Revision <= rev {
				t.Fatalf("event %+v, want a delete of a final record after its revision", e)
			}
			delete(finals, e.ID)
		}
		for id := range map[string]bool{"fin-s": true, "fin-d": true, "fin-c": true} {
			expectLast(t, h, id, true, true, h.cfg.markerTTL.String())
		}
		// Live records never expire: on a moved clock, long after; on real time, they outlived
		// the final ones written after them.
		if h.advance != nil {
			h.advance(100 * h.cfg.retention)
		}
		for id, rev := range live {
			if got := mustGet(t, s, id); got.Revision != rev {
				t.Fatalf("%s at revision %d, want %d", id, got.Revision, rev)
			}
			expectLast(t, h, id, true, false, "")
		}
		// A new watch starts with the live records only.
		w2, err := s.Watch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer stopWatch(t, w2)
		initial := map[string]uint64{}
		for e := nextEvent(t, w2); e.Kind != kvstore.EventInitDone; e = nextEvent(t, w2) {
			initial[e.ID] = e.Revision
		}
		if len(initial) != len(live) || initial["live-w"] != live["live-w"] || initial["live-r"] != live["live-r"] {
			t.Fatalf("initial values %v, want %v", initial, live)
		}
	})

	t.Run("IDReusedAcrossRetirements", func(t *testing.T) {
		// Each life after the first is created over the delete marker the previous one left.
		t.Parallel()
		h := newHarness(t, withTTLs(time.Second, time.Hour))
		s, ctx := h.store, testContext(t)
		w, err := s.Watch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer stopWatch(t, w)
		expectEvent(t, w, kvstore.EventInitDone, "", 0)
		var last uint64
		for life := 1; life <= 3; life++ {
			if life > 1 {
				expectLast(t, h, "reused", true, true, h.cfg.markerTTL.String())
			}
			task := newTask("reused")
			task.Payload = []byte{byte('0' + life)}
			e, err := s.Create(ctx, task)
			if err != nil || e.Revision <= last {
				t.Fatalf("life %d: Create: %v, revision %d after %d", life, err, e.Revision, last)
			}
			expectEvent(t, w, kvstore.EventPut, "reused", e.Revision)
			if got := mustGet(t, s, "reused"); got.Revision != e.Revision || string(got.Task.Payload) != string(task.Payload) {
				t.Fatalf("life %d: Get = %q at %d", life, got.Task.Payload, got.Revision)
			}
			task.Status, task.Attempt, task.FinishedAt = kvstore.StatusSuccess, 1, task.UpdatedAt
			last = mustUpdate(t, s, task, e.Revision)
			expectEvent(t, w, kvstore.EventPut, "reused", last)
			awaitRetired(t, h, "reused")
			del := expectEvent(t, w, kvstore.EventDelete, "reused", 0)
			if del.Revision <= last {
				t.Fatalf("life %d: delete at %d, want after %d", life, del.Revision, last)
			}
			last = del.Revision
		}
	})

	t.Run("MarkersExpire", func(t *testing.T) {
		// No marker lives for ever: Delete's and the server's both go after the marker TTL, and
		// the id is then created over nothing.
		t.Parallel()
		h := newHarness(t, withTTLs(time.Second, time.Second))
		s, ctx := h.store, testContext(t)
		e := mustCreate(t, s, newTask("marked"))
		if err := s.Delete(ctx, "marked", e.Revision); err != nil {
			t.Fatal(err)
		}
		expectLast(t, h, "marked", true, true, h.cfg.markerTTL.String())
		awaitNoMessage(t, h, "marked")
		task := newTask("marked")
		e = mustCreate(t, s, task)
		task.Status, task.FinishedAt = kvstore.StatusDead, task.UpdatedAt
		mustUpdate(t, s, task, e.Revision)
		awaitRetired(t, h, "marked")
		awaitNoMessage(t, h, "marked")
		if e2 := mustCreate(t, s, newTask("marked")); e2.Revision <= e.Revision {
			t.Fatalf("Create over nothing: revision %d after %d", e2.Revision, e.Revision)
		}
	})
}

func mustUpdate(t *testing.T, s kvstore.Store, task *kvstore.Task, rev uint64) uint64 {
	t.Helper()
	r, err := s.Update(testContext(t), task, rev)
	if err != nil {
		t.Fatalf("Update %s at %d: %v", task.ID, rev, err)
	}
	return r
}

func expectLast(t *testing.T, h harness, id string, present, marker bool, ttl string) {
	t.Helper()
	if p, m, tt := h.last(t, id); p != present || m != marker || tt != ttl {
		t.Fatalf("last message of %s: present %v, marker %v, TTL %q; want %v, %v, %q", id, p, m, tt, present, marker, ttl)
	}
}

// awaitRetired waits until the final records of ids are gone. On a clock the test moves they must
// be there until the retention has passed and gone at once after; on real time the wait is a
// bounded poll.
func awaitRetired(t *testing.T, h harness, ids ...string) {
	t.Helper()
	gone := func() bool {
		for _, id := range ids {
			_, err := h.store.Get(testContext(t), id)
			if err == nil {
				return false
			}
			if !errors.Is(err, kvstore.ErrNotFound) {
				t.Fatalf("Get %s: %v", id, err)
			}
		}
		return true
	}
	if h.advance != nil {
		h.advance(h.cfg.retention - time.Millisecond)
		for _, id := range ids {
			mustGet(t, h.store, id)
		}
		h.advance(time.Millisecond)
		if !gone() {
			t.Fatalf("%v still there after the retention", ids)
		}
		return
	}
	checkFor(t, gone, "final records %v retired", ids)
}

// awaitNoMessage waits until the key of id has no message at all (its marker expired).
func awaitNoMessage(t *testing.T, h harness, id string) {
	t.Helper()
	none := func() bool { p, _, _ := h.last(t, id); return !p }
	if h.advance != nil {
		h.advance(h.cfg.markerTTL)
		if !none() {
			t.Fatalf("%s still has a message after the marker TTL", id)
		}
		return
	}
	checkFor(t, none, "the marker of %s expired", id)
}

// checkFor polls cond until it holds, failing the test after waitTimeout.
func checkFor(t *testing.T, cond func() bool, format string, args ...any) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-timer.C:
			t.Fatalf("not within %v: "+format, append([]any{waitTimeout}, args...)...)
		}
	}
}
