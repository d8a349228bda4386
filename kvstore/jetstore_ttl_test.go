package kvstore_test

import (
	"errors"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// A bucket created before retention by TTL (as e2b1414 created it: history 1, no LimitMarkerTTL)
// gets per-message TTLs and expiring markers when it is opened (and atomic publish, for grouped
// writes), nothing else changes, and from then on its final records retire.
func TestJetStoreOpenAddsTTLs(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	ctx := testContext(t)
	kv, bucket := e2b1414Bucket(t, js)
	old, err := kvstore.EncodeTask(newTask("old"))
	if err != nil {
		t.Fatal(err)
	}
	oldRev, err := kv.Create(ctx, kvstore.Key("old", 16), old)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, kvstore.Key("gone", 16), old); err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(ctx, kvstore.Key("gone", 16)); err != nil {
		t.Fatal(err)
	}
	before := streamConfig(t, js, bucket)
	if before.AllowMsgTTL || before.SubjectDeleteMarkerTTL != 0 {
		t.Fatalf("the old bucket already has TTLs: %+v", before)
	}

	cfg := kvstore.Config{Bucket: bucket, Retention: time.Second, MarkerTTL: 2 * time.Second, BatchMax: 1000}
	s := openJetStore(t, js, cfg)
	after := streamConfig(t, js, bucket)
	if !after.AllowMsgTTL || after.SubjectDeleteMarkerTTL != cfg.MarkerTTL {
		t.Fatalf("after open: AllowMsgTTL %v, SubjectDeleteMarkerTTL %v; want true, %v",
			after.AllowMsgTTL, after.SubjectDeleteMarkerTTL, cfg.MarkerTTL)
	}
	if !after.AllowAtomicPublish {
		t.Fatal("after open: the stream does not allow atomic publish (grouped writes)")
	}
	if b, a := withoutTTLs(before), withoutTTLs(after); !reflect.DeepEqual(b, a) {
		t.Fatalf("open changed more than the TTL and atomic publish settings\nbefore: %+v\n after: %+v", b, a)
	}
	if got := mustGet(t, s, "old"); got.Revision != oldRev {
		t.Fatalf("old record at %d, want %d", got.Revision, oldRev)
	}
	mustCreate(t, s, newTask("gone")) // over the old marker
	// A second open changes nothing.
	openJetStore(t, js, cfg)
	if again := streamConfig(t, js, bucket); !reflect.DeepEqual(again, after) {
		t.Fatalf("second open changed the stream\nbefore: %+v\n after: %+v", after, again)
	}

	task := newTask("old")
	task.Status, task.FinishedAt = kvstore.StatusSuccess, task.UpdatedAt
	mustUpdate(t, s, task, oldRev)
	if _, _, ttl := lastMsg(t, js, s, "old"); ttl != "1s" {
		t.Fatalf("final write carries Nats-TTL %q, want 1s", ttl)
	}
	checkFor(t, func() bool {
		_, err := s.Get(ctx, "old")
		return errors.Is(err, kvstore.ErrNotFound)
	}, "the final record retired")
	mustCreate(t, s, newTask("old"))
}

func streamConfig(t *testing.T, js jetstream.JetStream, bucket string) jetstream.StreamConfig {
	t.Helper()
	str, err := js.Stream(testContext(t), "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	return str.CachedInfo().Config
}

// withoutTTLs is cfg without the two settings OpenJetStore adds and the metadata the server keeps
// for itself (the API level a stream's features need, which TTLs raise).
func withoutTTLs(cfg jetstream.StreamConfig) jetstream.StreamConfig {
	cfg.AllowMsgTTL, cfg.SubjectDeleteMarkerTTL, cfg.AllowAtomicPublish = false, 0, false
	cfg.Metadata = maps.Clone(cfg.Metadata)
	maps.DeleteFunc(cfg.Metadata, func(k, _ string) bool { return strings.HasPrefix(k, "_nats.") })
	return cfg
}

func TestJetStoreConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  kvstore.Config
		want string
	}{
		{kvstore.Config{Retention: 999 * time.Millisecond}, "retention 999ms: want at least 1s"},
		{kvstore.Config{Retention: -time.Hour}, "retention -1h0m0s: want at least 1s"},
		{kvstore.Config{MarkerTTL: 500 * time.Millisecond}, "marker TTL 500ms: want at least 1s"},
		{kvstore.Config{WatchBuffer: -1}, "watch buffer -1: want at least 1"},
		{kvstore.Config{Timeout: -1}, "negative timeout"},
		{kvstore.Config{Partitions: 4097}, "partitions 4097 out of range"},
	} {
		// Validation comes before any use of the connection.
		_, err := kvstore.OpenJetStore(testContext(t), nil, tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
}

// e2b1414Bucket creates a task bucket as e2b1414 created it: 16 partitions, history 1, no TTLs,
// no LimitMarkerTTL, no atomic publish.
func e2b1414Bucket(t *testing.T, js jetstream.JetStream) (jetstream.KeyValue, string) {
	t.Helper()
	bucket := newBucketName()
	kv, err := js.CreateKeyValue(testContext(t), jetstream.KeyValueConfig{
		Bucket:      bucket,
		Description: "ax bridge delayed-task records: one key per task, p<partition>.<task id>, 16 partitions",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    1,
		Metadata:    map[string]string{kvstore.MetaPartitions: "16"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return kv, bucket
}
