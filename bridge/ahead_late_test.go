package bridge

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/kvstore"
)

// lateClaimStore holds back the completion of the claim of task id until release is closed; the
// write itself lands at once.
type lateClaimStore struct {
	Store
	id      string
	release chan struct{}
}

func (s *lateClaimStore) UpdateAsync(ctx context.Context, t *kvstore.Task, rev uint64, done func(uint64, error)) {
	if t.ID != s.id || t.Status != kvstore.StatusRunning {
		s.Store.UpdateAsync(ctx, t, rev, done)
		return
	}
	s.Store.UpdateAsync(ctx, t, rev, func(r uint64, err error) {
		go func() { <-s.release; done(r, err) }()
	})
}

// A claim ahead whose completion comes only after the record changed again (deleted, or
// rewritten by another writer) is not fired: the change seen on the watch wins. The marker, held
// due just after, fires alone.
func TestClaimAheadLandsAfterANewerWrite(t *testing.T) {
	t.Parallel()
	for _, change := range []string{"deleted", "rewritten"} {
		t.Run(change, func(t *testing.T) {
			t.Parallel()
			e := newLoopEnv(t, Config{ClaimAhead: time.Second})
			st := &lateClaimStore{Store: e.fs, id: "late", release: make(chan struct{})}
			fires := e.consume(4)
			var held, indexed atomic.Int64
			b, err := New(e.nc, st, e.cfg)
			if err != nil {
				t.Fatal(err)
			}
			b.m.loop.observe = func(s loopStats) { held.Store(int64(s.held)); indexed.Store(int64(s.indexed)) }
			for range claimSamples {
				b.fired.times.add(time.Second) // the window stays at its bound
			}
			if err := b.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				close(st.release)
				if err := b.Stop(ctx); err != nil {
					t.Errorf("stop bridge: %v", err)
				}
			})
			<-b.Ready()
			due := e.clock.in(1500 * time.Millisecond)
			e.create("late", due)
			e.create("marker", due+100)
			ctx := context.Background()
			if !checkFor(10*time.Second, func() bool {
				r, err := e.mem.Get(ctx, "late")
				return err == nil && r.Task.Status == kvstore.StatusRunning && held.Load() == 1
			}) {
				t.Fatal("the claim of late did not land, or the marker is not held")
			}
			r, _ := e.mem.Get(ctx, "late")
			want := int64(3) // the marker, late and sync
			switch change {
			case "deleted":
				if err := e.mem.Delete(ctx, "late", r.Revision); err != nil {
					t.Fatal(err)
				}
				want = 2
			case "rewritten":
				task := r.Task
				task.Status, task.DueAt, task.Attempt = kvstore.StatusWaiting, e.clock.in(time.Hour), 0
				task.LeaseUntil, task.Owner, task.Claim = 0, "", 0
				if _, err := e.mem.Update(ctx, &task, r.Revision); err != nil {
					t.Fatal(err)
				}
			}
			e.create("sync", e.clock.in(time.Hour)) // its event comes after the change's
			if !checkFor(10*time.Second, func() bool { return indexed.Load() == want }) {
				t.Fatalf("indexed %d, want %d", indexed.Load(), want)
			}
			st.release <- struct{}{} // the claim's completion reaches the loop now
			f := next(t, fires, 10*time.Second)
			if f.id != "marker" {
				t.Fatalf("fired %s attempt %d; want only the marker", f.id, f.attempt)
			}
			neverEarly(t, f)
			if !checkFor(5*time.Second, func() bool { return held.Load() == 0 }) {
				t.Errorf("the loop holds %d claims after the marker fired, want 0", held.Load())
			}
		})
	}
}

// A replica that is fenced (no heartbeat confirmed) when a claim it holds comes due does not fire
// it; once its heartbeats are confirmed again, within the attempt's lease, it fires the attempt it
// claimed, not before its due time.
func TestClaimAheadNotFiredWhileFenced(t *testing.T) {
	t.Parallel()
	e := newAheadEnv(t)
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	m, err := kvstore.OpenMembers(context.Background(), js, kvstore.MembersConfig{Bucket: "AHEAD_MEMBERS"})
	if err != nil {
		t.Fatal(err)
	}
	flaky := &flakyMembers{Membership: m}
	e.cfg.Members, e.cfg.PartitionLease = flaky, 500*time.Millisecond
	fires := e.consume(2)
	b := e.start()
	due := e.clock.in(1500 * time.Millisecond)
	e.create("fenced", due)
	e.waitHeld(1)
	flaky.cut.Store(true)
	if !checkFor(5*time.Second, func() bool { return !b.alive() }) {
		t.Fatal("the replica is not fenced after its heartbeats failed")
	}
	noFire(t, fires, time.Until(time.UnixMilli(due))+500*time.Millisecond, "while fenced")
	flaky.cut.Store(false)
	f := next(t, fires, 10*time.Second)
	neverEarly(t, f)
	if f.id != "fenced" || f.attempt != 1 {
		t.Fatalf("fired %s attempt %d, want fenced attempt 1", f.id, f.attempt)
	}
}
