package faultstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/axbridge/axbridge/internal/faultstore"
	"github.com/axbridge/axbridge/kvstore"
)

func task(id string) *kvstore.Task {
	return &kvstore.Task{ID: id, BizType: "b", Status: kvstore.StatusWaiting, DueAt: 1, AckWait: time.Second}
}

func TestFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := kvstore.NewMemStore(4)
	s := faultstore.New(mem)

	// FailBefore: nothing is written.
	s.Inject(faultstore.Rule{Op: faultstore.OpCreate, ID: "a", Mode: faultstore.FailBefore, Times: 1})
	if _, err := s.Create(ctx, task("a")); !errors.Is(err, faultstore.ErrInjected) {
		t.Fatalf("create with FailBefore: %v", err)
	}
	if _, err := mem.Get(ctx, "a"); !errors.Is(err, kvstore.ErrNotFound) {
		t.Fatalf("FailBefore wrote the record: %v", err)
	}
	// The rule was used up: the next create goes through.
	e, err := s.Create(ctx, task("a"))
	if err != nil {
		t.Fatalf("create after the rule: %v", err)
	}

	// ApplyThenTimeout: written, but the caller hears an unknown outcome.
	next := e.Task
	next.DueAt = 2
	s.Inject(faultstore.Rule{Op: faultstore.OpUpdate, Mode: faultstore.ApplyThenTimeout, Times: 1})
	done := make(chan error, 1)
	s.UpdateAsync(ctx, &next, e.Revision, func(_ uint64, err error) { done <- err })
	if err := <-done; !errors.Is(err, faultstore.ErrUnknownOutcome) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("update with ApplyThenTimeout: %v", err)
	}
	got, err := mem.Get(ctx, "a")
	if err != nil || got.Task.DueAt != 2 {
		t.Fatalf("ApplyThenTimeout did not apply: %+v %v", got, err)
	}

	// Conflict: nothing written, ErrConflict.
	s.Inject(faultstore.Rule{Op: faultstore.OpUpdate, ID: "a", Mode: faultstore.Conflict, Times: 1})
	next = got.Task
	next.DueAt = 3
	if _, err := s.Update(ctx, &next, got.Revision); !errors.Is(err, kvstore.ErrConflict) {
		t.Fatalf("update with Conflict: %v", err)
	}
	if cur, _ := mem.Get(ctx, "a"); cur.Revision != got.Revision {
		t.Fatalf("Conflict wrote: revision %d, want %d", cur.Revision, got.Revision)
	}

	// Hang: blocks until the context ends.
	s.Inject(faultstore.Rule{Op: faultstore.OpGet, Mode: faultstore.Hang, Times: 1})
	hctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Get(hctx, "a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("get with Hang: %v", err)
	}
	if n := s.Calls(faultstore.OpGet); n != 1 {
		t.Fatalf("gets counted %d, want 1", n)
	}
}

func TestWatchFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := faultstore.New(kvstore.NewMemStore(4))

	s.Inject(faultstore.Rule{Op: faultstore.OpWatch, Mode: faultstore.FailBefore, Times: 1})
	if _, err := s.Watch(ctx); !errors.Is(err, faultstore.ErrInjected) {
		t.Fatalf("watch with FailBefore: %v", err)
	}
	w, err := s.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-w.Events(); ev.Kind != kvstore.EventInitDone {
		t.Fatalf("first event %v, want init done", ev.Kind)
	}
	s.Inject(faultstore.Rule{Op: faultstore.OpEvent, ID: "dropped", Mode: faultstore.Drop})
	for _, id := range []string{"dropped", "kept"} {
		if _, err := s.Create(ctx, task(id)); err != nil {
			t.Fatal(err)
		}
	}
	if ev := <-w.Events(); ev.ID != "kept" {
		t.Fatalf("event for %q, want only %q (the other dropped)", ev.ID, "kept")
	}
	s.EndWatches()
	for range w.Events() {
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
}
