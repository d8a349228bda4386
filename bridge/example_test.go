package bridge_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/kvstore"
)

// Example runs a bridge inside a Go program, on an embedded NATS server, schedules a task with a
// plain JetStream publish and consumes it with a queue subscription.
func Example() {
	dir, _ := os.MkdirTemp("", "axbridge-example")
	defer os.RemoveAll(dir)
	ns, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoSigs: true})
	ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		fmt.Println("server not ready")
		return
	}
	nc, _ := nats.Connect(ns.ClientURL())
	defer nc.Close()
	ctx := context.Background()

	// The service: a task bucket and a bridge on it.
	js, _ := jetstream.New(nc)
	store, err := kvstore.OpenJetStore(ctx, js, kvstore.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	b, err := bridge.New(nc, store, bridge.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := b.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer b.Stop(ctx)

	// A consumer: ack every task.
	done := make(chan struct{})
	_, _ = nc.QueueSubscribe("ax.fire.orders", "closers", func(m *nats.Msg) {
		fmt.Printf("fired %s attempt %s: %s\n", m.Header.Get("Ax-Task-Id"), m.Header.Get("Ax-Attempt"), m.Data)
		_ = m.Ack()
		close(done)
	})

	// A producer: close order 42 in 100ms unless paid.
	m := nats.NewMsg("ax.schedule.orders")
	m.Header.Set("Ax-Task-Id", "order-42")
	m.Header.Set("Ax-Delay", "100ms")
	m.Data = []byte(`{"id":42}`)
	if _, err := js.PublishMsg(ctx, m); err != nil {
		fmt.Println(err)
		return
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		fmt.Println("not fired")
	}
	// Output: fired order-42 attempt 1: {"id":42}
}
