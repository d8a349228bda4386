package kvstore_test

import (
	"cmp"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

func TestMemStore(t *testing.T) {
	t.Parallel()
	testStore(t, func(t *testing.T, opts ...harnessOpt) harness {
		cfg := newHarnessConfig(opts)
		clock := &fakeClock{now: time.UnixMilli(1767225600000)}
		m := kvstore.NewMemStore(16, kvstore.WithRetention(cfg.retention), kvstore.WithMarkerTTL(cfg.markerTTL),
			kvstore.WithClock(clock.Now))
		return harness{
			store: m,
			putRaw: func(t *testing.T, key string, val []byte) {
				kvstore.PutRawForTest(m, key, val)
			},
			last: func(t *testing.T, id string) (bool, bool, string) {
				present, marker, ttl := kvstore.LastMsgForTest(m, id)
				if ttl == 0 {
					return present, marker, ""
				}
				return present, marker, ttl.String()
			},
			advance: clock.Advance,
			cfg:     cfg,
		}
	})
}

// fakeClock is a clock that moves only when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestJetStore(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	testStore(t, func(t *testing.T, opts ...harnessOpt) harness {
		return jetHarness(t, srv.ClientURL(), 1, newHarnessConfig(opts))
	})
}

// TestJetStoreSingleWrites runs the suite with grouping off (BatchMax 1, the default): every async
// write goes out on its own, as on a server without atomic publish. TestJetStore and TestJetStoreR3
// run it grouped (BatchMax 1000).
func TestJetStoreSingleWrites(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	testStore(t, func(t *testing.T, opts ...harnessOpt) harness {
		cfg := newHarnessConfig(opts)
		cfg.batchMax = 1
		return jetHarness(t, srv.ClientURL(), 1, cfg)
	})
}

// TestJetStoreR3 runs the suite on a replicated bucket of a 3-node cluster, where the server
// reports CAS conflicts with code 10164 instead of 10071.
func TestJetStoreR3(t *testing.T) {
	t.Parallel()
	c := natstest.RunCluster(t, 3)
	testStore(t, func(t *testing.T, opts ...harnessOpt) harness {
		return jetHarness(t, c.ClientURLs(), 3, newHarnessConfig(opts))
	})
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
func jetHarness(t *testing.T, url string, replicas int, cfg harnessConfig) harness {
	t.Helper()
	js := newJS(t, url)
	batchMax := cmp.Or(cfg.batchMax, 1000)
	s := openJetStore(t, js, kvstore.Config{Bucket: newBucketName(), Replicas: replicas,
		Retention: cfg.retention, MarkerTTL: cfg.markerTTL, BatchMax: batchMax})
	if s.Grouping() != (cfg.batchMax != 1) {
		t.Fatalf("BatchMax %d: grouping %v", cfg.batchMax, s.Grouping())
	}
	return harness{
		store: s,
		putRaw: func(t *testing.T, key string, val []byte) {
			t.Helper()
			kv, err := js.KeyValue(testContext(t), s.Bucket())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Put(testContext(t), key, val); err != nil {
				t.Fatalf("raw put %s: %v", key, err)
			}
		},
		last: func(t *testing.T, id string) (bool, bool, string) {
			t.Helper()
			return lastMsg(t, js, s, id)
		},
		cfg: cfg,
	}
}

// lastMsg reads the last message under the key of id from the bucket's stream (its leader):
// whether there is one, whether it is a delete marker, and its Nats-TTL.
func lastMsg(t *testing.T, js jetstream.JetStream, s *kvstore.JetStore, id string) (present, marker bool, ttl string) {
	t.Helper()
	ctx := testContext(t)
	str, err := js.Stream(ctx, "KV_"+s.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	m, err := str.GetLastMsgForSubject(ctx, "$KV."+s.Bucket()+"."+kvstore.Key(id, s.Partitions()))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, false, ""
	}
	if err != nil {
		t.Fatalf("last message of %s: %v", id, err)
	}
	marker = m.Header.Get("KV-Operation") != "" || m.Header.Get(jetstream.MarkerReasonHeader) != ""
	return true, marker, m.Header.Get(jetstream.MsgTTLHeader)
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
