package main

import (
	"context"
	"io"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// A new bucket gets --partitions (default 60); an existing one keeps its own count unless the flag
// is given, so that raising the default does not lock out buckets created before.
func TestPartitionsOfExistingBucket(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.partitions != 60 || o.partitionsSet {
		t.Errorf("default: partitions %d, set %v; want 60, false", o.partitions, o.partitionsSet)
	}
	if o, _ := parseFlags([]string{"--partitions", "16"}, io.Discard); o.partitions != 16 || !o.partitionsSet {
		t.Errorf("--partitions 16: partitions %d, set %v", o.partitions, o.partitionsSet)
	}
	t.Setenv("AX_PARTITIONS", "12")
	if o, _ := parseFlags(nil, io.Discard); o.partitions != 12 || !o.partitionsSet {
		t.Errorf("AX_PARTITIONS=12: partitions %d, set %v", o.partitions, o.partitionsSet)
	}

	srv := natstest.RunServer(t)
	js, err := jetstream.New(natstest.Connect(t, srv.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if n, ok := existingPartitions(ctx, js, "OLD"); ok {
		t.Errorf("no bucket yet: got %d partitions", n)
	}
	s, err := kvstore.OpenJetStore(ctx, js, kvstore.Config{Bucket: "OLD", Partitions: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n, ok := existingPartitions(ctx, js, "OLD"); !ok || n != 16 {
		t.Errorf("existing bucket: %d partitions (%v), want 16", n, ok)
	}
}
