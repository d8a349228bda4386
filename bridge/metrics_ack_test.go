package bridge

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/internal/natstest"
)

// The drop counter follows what the client drops on a subscription over its pending limits, and
// keeps the count once the subscription is closed.
func TestDropCounter(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc := natstest.Connect(t, srv.ClientURL())
	release := make(chan struct{})
	sub, err := nc.Subscribe("acks", func(*nats.Msg) { <-release })
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(1, -1); err != nil {
		t.Fatal(err)
	}
	m := &ackMetrics{}
	m.countDrops(sub)
	for range 10 {
		if err := nc.Publish("acks", []byte("+ACK")); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil { // the PONG comes after the ten messages: all were handled
		t.Fatal(err)
	}
	n := m.drops.total()
	if n < 1 || n > 9 {
		t.Fatalf("dropped %v of 10 with one in the handler and one pending; want 1 to 9", n)
	}
	close(release)
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if got := m.drops.total(); got != n {
		t.Errorf("after unsubscribe the count is %v, was %v", got, n)
	}
}
