package kvstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

func TestMemStore(t *testing.T) {
	t.Parallel()
	testStore(t, func(t *testing.T) harness {
		m := kvstore.NewMemStore(16)
		return harness{store: m, putRaw: func(t *testing.T, key string, val []byte) {
			kvstore.PutRawForTest(m, key, val)
		}}
	})
}

func TestJetStore(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	testStore(t, func(t *testing.T) harness { return jetHarness(t, srv.ClientURL(), 1) })
}

// TestJetStoreR3 runs the suite on a replicated bucket of a 3-node cluster, where the server
// reports CAS conflicts with code 10164 instead of 10071.
func TestJetStoreR3(t *testing.T) {
	t.Parallel()
	c := natstest.RunCluster(t, 3)
	testStore(t, func(t *testing.T) harness { return jetHarness(t, c.ClientURLs(), 3) })
	t.Run("BucketConfig", func(t *testing.T) {
		t.Parallel()
		js := newJS(t, c.ClientURLs())
		s := openJetStore(t, js, kvstore.Config{Bucket: newBucketName(), Replicas: 3})
		checkBucketConfig(t, js, s.Bucket(), kvstore.DefaultPartitions, 3)
	})
}

var bucketSeq atomic.Int64

// newBucketName is a bucket name no other test uses.
func newBucketName() string { return fmt.Sprintf("T%d", bucketSeq.Add(1)) }

// jetHarness opens a JetStore on a fresh bucket over a fresh connection; both close with the test.
func jetHarness(t *testing.T, url string, replicas int) harness {
	t.Helper()
	js := newJS(t, url)
	s := openJetStore(t, js, kvstore.Config{Bucket: newBucketName(), Replicas: replicas})
	return harness{store: s, putRaw: func(t *testing.T, key string, val []byte) {
		t.Helper()
		kv, err := js.KeyValue(testContext(t), s.Bucket())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(testContext(t), key, val); err != nil {
			t.Fatalf("raw put %s: %v", key, err)
		}
	}}
}

func newJS(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// openJetStore opens a store and closes it when the test ends. A cluster that has just formed may
// not yet place a replicated bucket; that is retried for a while.
func openJetStore(t *testing.T, js jetstream.JetStream, cfg kvstore.Config) *kvstore.JetStore {
	t.Helper()
	var s *kvstore.JetStore
	var err error
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		s, err = kvstore.OpenJetStore(testContext(t), js, cfg)
		if err == nil || time.Now().After(deadline) {
			break
		}
		t.Logf("open %s: %v; retrying", cfg.Bucket, err)
		<-tick.C
	}
	if err != nil {
		t.Fatalf("OpenJetStore: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
