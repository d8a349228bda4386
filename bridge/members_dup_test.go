package bridge

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// A second bridge given a running one's replica id fails Start with ErrReplicaInUse; the first
// goes on heartbeating, owns every partition and fires each task once.
func TestSameReplicaIDRefused(t *testing.T) {
	t.Parallel()
	e := newPartEnv(t, 60, time.Second)
	a := e.start("dup", nil)
	e.stable(a)
	nc := natstest.Connect(t, e.srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := kvstore.OpenJetStore(context.Background(), js, kvstore.Config{Partitions: e.n})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(nc, store, Config{ReplicaID: "dup", PartitionLease: e.lease, AckWait: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	err = b.Start(context.Background())
	t.Logf("second Start: %v", err)
	if !errors.Is(err, ErrReplicaInUse) {
		_ = b.Stop(context.Background())
		t.Fatalf("a second bridge with replica id dup: Start %v, want ErrReplicaInUse", err)
	}
	ids := e.idsIn("dup", 120, func(int) bool { return true })
	e.create(ids, time.Now().UnixMilli())
	e.settled(ids, 15*time.Second)
	if by := e.once(ids); by["dup"] != len(ids) {
		t.Errorf("fires by replica %v, want all %d by dup", by, len(ids))
	}
	if !heartbeatAfter(t, e, "dup", time.Now(), 5*time.Second) {
		t.Error("the first bridge no longer heartbeats")
	}
	if n := len(a.owned()); n != e.n {
		t.Errorf("the first bridge owns %d partitions, want all %d", n, e.n)
	}
	if err := a.b.Health(); err != nil {
		t.Errorf("the first bridge's health: %v", err)
	}
}
