package bridge_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// silentWatch is a watch whose initial values never end.
type silentWatch struct {
	events chan kvstore.Event
	once   sync.Once
}

func (w *silentWatch) Events() <-chan kvstore.Event { return w.events }
func (w *silentWatch) Stop() error                  { w.once.Do(func() { close(w.events) }); return nil }

type silentStore struct{ *kvstore.MemStore }

func (silentStore) Watch(context.Context, ...int) (kvstore.Watcher, error) {
	return &silentWatch{events: make(chan kvstore.Event)}, nil
}

// A bridge stopped before its initial load ended never closes Ready, and closes Stopped: a
// caller waiting for readiness waits on both and is not left hanging.
func TestStoppedBeforeReady(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	b, err := bridge.New(natstest.Connect(t, srv.ClientURL()), silentStore{kvstore.NewMemStore(4)},
		bridge.Config{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Stopped():
	default:
		t.Fatal("Stopped not closed after Stop returned")
	}
	select {
	case <-b.Ready():
		t.Fatal("Ready closed without an initial load")
	default:
	}
}
