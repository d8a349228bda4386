package bench

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// Two claims of one WAITING record at the same revision: both are counted as claims, the one
// that loses its compare-and-swap as a conflict; an ack's write (SUCCESS) is not a claim.
func TestClaimCounter(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc := natstest.Connect(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	store, err := kvstore.OpenJetStore(ctx, js, kvstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := &claimCounter{JetStore: store}
	now := time.Now().UnixMilli()
	e, err := store.Create(ctx, &kvstore.Task{ID: "t-1", BizType: "b", Status: kvstore.StatusWaiting, DueAt: now,
		MaxRetry: 3, AckWait: time.Second, Backoff: []time.Duration{time.Second}, CreatedAt: now, UpdatedAt: now})
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan error, 2)
	var won uint64
	for _, owner := range []string{"a", "b"} {
		claimed, err := kvstore.Claim(e.Task, now, owner, e.Revision)
		if err != nil {
			t.Fatal(err)
		}
		c.UpdateAsync(ctx, &claimed, e.Revision, func(rev uint64, err error) {
			if err == nil {
				won = rev
			}
			results <- err
		})
	}
	var errs []error
	for range 2 {
		errs = append(errs, <-results)
	}
	if c.claims.Load() != 2 || c.conflicts.Load() != 1 {
		t.Fatalf("claims %d, conflicts %d (results %v), want 2 and 1", c.claims.Load(), c.conflicts.Load(), errs)
	}
	cur, err := store.Get(ctx, "t-1")
	if err != nil {
		t.Fatal(err)
	}
	acked, err := kvstore.Ack(cur.Task, cur.Task.Claim, now)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	c.UpdateAsync(ctx, &acked, won, func(_ uint64, err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n, _, failed := claimTotals([]*claimCounter{c}); n != 2 || failed != 0 {
		t.Errorf("an ack counted as a claim, or a failure: %d claims, %d failed", n, failed)
	}
}
