package natstest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/axbridge/axbridge/internal/natstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestServerRestartKeepsStreams(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "T", Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	url := s.ClientURL()
	s.Restart(t)
	if s.ClientURL() != url {
		t.Logf("port changed on restart: %s -> %s", url, s.ClientURL())
	}
	nc2 := natstest.Connect(t, s.ClientURL())
	js2, _ := jetstream.New(nc2)
	kv2, err := js2.KeyValue(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv2.Get(ctx, "k")
	if err != nil || string(e.Value()) != "v" {
		t.Fatalf("after restart: %v %v", e, err)
	}
}

func TestClusterR3(t *testing.T) {
	t.Parallel()
	c := natstest.RunCluster(t, 3)
	nc := natstest.Connect(t, c.ClientURLs())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "T", Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
}
