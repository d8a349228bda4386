package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// An intake consumer with a max deliver (so the housekeeper does not purge), 100 tasks scheduled,
// fired and retired, then the consumer deleted: the bridge creates it again, which delivers every
// message still in the stream once more. None of the 100 fires again (their schedule messages are
// older than the consumer and than the retention: refused with STALE_REPLAY), and a new schedule
// fires (review N7).
func TestRecreatedConsumerDoesNotReviveRetiredTasks(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	e := newEnvOn(t, srv.ClientURL(), kvstore.Config{})
	e.srv = srv
	ctx := context.Background()
	if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: "AX_SCHEDULE", Subjects: []string{"ax.schedule.>"},
		Storage: jetstream.FileStorage, Discard: jetstream.DiscardNew}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.CreateConsumer(ctx, "AX_SCHEDULE", jetstream.ConsumerConfig{Durable: "axbridge",
		AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 5, FilterSubject: "ax.schedule.>"}); err != nil {
		t.Fatal(err)
	}
	e.startBridgeOn(srv.ClientURL(), kvstore.Config{Retention: 2 * time.Second}, bridge.Config{})
	var mu sync.Mutex
	fired := map[string]int{}
	fires := e.consume("ax.fire.orders", func(m *nats.Msg) {
		mu.Lock()
		fired[m.Header.Get(bridge.HeaderTaskID)]++
		mu.Unlock()
		_ = m.Ack()
	})
	rejected := e.consume("ax.rejected.orders", nil)
	const n = 100
	for i := range n {
		e.schedule("orders", "x", bridge.HeaderTaskID, fmt.Sprintf("t-%d", i))
	}
	for range n {
		fires.next(t, 10*time.Second)
	}
	if !checkFor(30*time.Second, func() bool {
		for i := range n {
			if _, err := e.store.Get(ctx, fmt.Sprintf("t-%d", i)); !errors.Is(err, kvstore.ErrNotFound) {
				return false
			}
		}
		return true
	}) {
		t.Fatal("records not retired")
	}
	if err := e.js.DeleteConsumer(ctx, "AX_SCHEDULE", "axbridge"); err != nil {
		t.Fatal(err)
	}
	for range n {
		f := rejected.next(t, 20*time.Second)
		if code := f.msg.Header.Get(bridge.HeaderErrorCode); code != bridge.CodeStaleReplay {
			t.Fatalf("task %s rejected with %s, want %s", f.msg.Header.Get(bridge.HeaderTaskID), code, bridge.CodeStaleReplay)
		}
	}
	e.scheduleRetrying(t, "orders", "y", bridge.HeaderTaskID, "after")
	if id := fires.next(t, 20*time.Second).msg.Header.Get(bridge.HeaderTaskID); id != "after" {
		t.Fatalf("fired %q, want after", id)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		if c := fired[fmt.Sprintf("t-%d", i)]; c != 1 {
			t.Errorf("t-%d fired %d times", i, c)
		}
	}
}

// A schedule older than the retention but younger than the intake consumer (a backlog that waited
// while no bridge ran) is stored and fires: only what predates the consumer can be a replay. The
// bridge's clock runs an hour ahead, so every message is older than the 2s retention by it.
func TestOldScheduleAfterConsumerIsStored(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	e := newEnvOn(t, srv.ClientURL(), kvstore.Config{})
	e.srv = srv
	e.startBridgeOn(srv.ClientURL(), kvstore.Config{Retention: 2 * time.Second},
		bridge.Config{Now: func() time.Time { return time.Now().Add(time.Hour) }})
	fires := e.consume("ax.fire.orders", func(m *nats.Msg) { _ = m.Ack() })
	rejected := e.consume("ax.rejected.orders", nil)
	e.schedule("orders", "x", bridge.HeaderTaskID, "backlog")
	if id := fires.next(t, 10*time.Second).msg.Header.Get(bridge.HeaderTaskID); id != "backlog" {
		t.Fatalf("fired %q, want backlog", id)
	}
	rejected.none(t, 100*time.Millisecond)
}
