package main

import (
	"context"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/kvstore"
)

// existingPartitions is the partition count recorded in the metadata of an existing task bucket;
// false if there is no such bucket (or it has no valid count, which OpenJetStore then reports).
func existingPartitions(ctx context.Context, js jetstream.JetStream, bucket string) (int, bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return 0, false
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(st.Metadata()[kvstore.MetaPartitions])
	return n, err == nil && n > 0
}
