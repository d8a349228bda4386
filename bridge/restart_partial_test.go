package bridge_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// A bridge that starts over tasks already in a JetStream bucket loads its index from the records'
// headers, without payloads. Every task, overdue ones and ones due in a moment, still fires once,
// with exactly its own payload and caller headers: the payload is read before the fire, never
// taken from the headers-only entry.
func TestRestartFiresWithPayloads(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc := natstest.Connect(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	store, err := kvstore.OpenJetStore(ctx, js, kvstore.Config{Bucket: "RESTART"})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	const n = 60
	now := time.Now().UnixMilli()
	// Payloads of some KiB, so that the bucket's records are large enough to be loaded
	// headers-only.
	payload := func(id string) string { return strings.Repeat(id+"|", 800) }
	createRestartTasks(ctx, t, store, n, now, payload)

	var mu sync.Mutex
	fired := map[string]int{}
	all := make(chan struct{})
	sub, err := nc.Subscribe(bridge.FirePrefix+"restart", func(m *nats.Msg) {
		id := m.Header.Get(bridge.HeaderTaskID)
		if got, want := string(m.Data), payload(id); got != want {
			t.Errorf("%s fired with payload %q, want %q", id, got, want)
		}
		if got := m.Header.Get("X-Id"); got != id {
			t.Errorf("%s fired with caller header X-Id %q, want %q", id, got, id)
		}
		_ = m.Ack()
		mu.Lock()
		defer mu.Unlock()
		if fired[id]++; fired[id] > 1 {
			t.Errorf("%s fired %d times", id, fired[id])
		}
		if len(fired) == n && fired[id] == 1 {
			close(all)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	defer func() { _ = sub.Unsubscribe() }()

	b, err := bridge.New(nc, store, bridge.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := b.Stop(sctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	select {
	case <-all:
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%d of %d tasks fired", len(fired), n)
	}
	// Once: every record is SUCCESS (so no attempt is pending), and nothing more fires in the
	// half second after that (the subscription reports a second fire of any task).
	mu.Lock()
	ids := slices.Collect(maps.Keys(fired))
	mu.Unlock()
	checkAllSuccess(ctx, t, store, ids)
	<-time.After(500 * time.Millisecond)
}

// createRestartTasks creates n WAITING tasks r-0 to r-<n-1> of bizType restart, each with its
// payload and an X-Id header of its id: the even ones 5 s overdue at now, the odd ones due 300 ms
// after it.
func createRestartTasks(ctx context.Context, t *testing.T, store *kvstore.JetStore, n int, now int64, payload func(id string) string) {
	t.Helper()
	for i := range n {
		id := fmt.Sprintf("r-%d", i)
		due := now - 5000 // overdue
		if i%2 == 1 {
			due = now + 300 // due in a moment
		}
		_, err := store.Create(ctx, &kvstore.Task{
			ID: id, BizType: "restart", Payload: []byte(payload(id)), Header: map[string][]string{"X-Id": {id}},
			Status: kvstore.StatusWaiting, DueAt: due, MaxRetry: 3, AckWait: 30 * time.Second,
			Backoff: []time.Duration{time.Hour}, CreatedAt: now, UpdatedAt: now,
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// checkAllSuccess checks that the record of every id becomes SUCCESS within 10 s.
func checkAllSuccess(ctx context.Context, t *testing.T, store *kvstore.JetStore, ids []string) {
	t.Helper()
	for _, id := range ids {
		if !bridge.CheckFor(10*time.Second, func() bool {
			e, err := store.Get(ctx, id)
			return err == nil && e.Task.Status == kvstore.StatusSuccess
		}) {
			t.Errorf("task %s is not SUCCESS", id)
		}
	}
}
