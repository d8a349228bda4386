package kvstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

func TestMapError(t *testing.T) {
	t.Parallel()
	other := errors.New("something else")
	for _, tc := range []struct {
		name string
		in   error
		want error
	}{
		{"wrong last sequence 10071", &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}, kvstore.ErrConflict},
		{"replicated wrong last sequence 10164", &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant}, kvstore.ErrConflict},
		{"key exists", fmt.Errorf("create: %w", jetstream.ErrKeyExists), kvstore.ErrConflict},
		{"revision mismatch", fmt.Errorf("%w: %w", &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant}, jetstream.ErrKeyRevisionMismatch), kvstore.ErrConflict},
		{"key not found", jetstream.ErrKeyNotFound, kvstore.ErrNotFound},
		{"key deleted", jetstream.ErrKeyDeleted, kvstore.ErrNotFound},
		{"no message", &jetstream.APIError{Code: 404, ErrorCode: jetstream.JSErrCodeMessageNotFound}, kvstore.ErrNotFound},
		{"other", other, other},
		{"other API error", &jetstream.APIError{Code: 503, ErrorCode: 10008}, nil},
	} {
		got := kvstore.MapErrorForTest(tc.in)
		if tc.want == nil {
			if errors.Is(got, kvstore.ErrConflict) || errors.Is(got, kvstore.ErrNotFound) {
				t.Errorf("%s: mapped to %v", tc.name, got)
			}
			continue
		}
		if !errors.Is(got, tc.want) {
			t.Errorf("%s: mapError(%v) = %v, want %v", tc.name, tc.in, got, tc.want)
		}
	}
	if kvstore.MapErrorForTest(nil) != nil {
		t.Error("mapError(nil) != nil")
	}
}

func TestJetStoreOpen(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	ctx := testContext(t)

	t.Run("Defaults", func(t *testing.T) {
		s := openJetStore(t, js, kvstore.Config{})
		if s.Bucket() != kvstore.DefaultBucket || s.Partitions() != kvstore.DefaultPartitions {
			t.Fatalf("bucket %s, %d partitions", s.Bucket(), s.Partitions())
		}
	})

	t.Run("PartitionMismatch", func(t *testing.T) {
		bucket := newBucketName()
		s := openJetStore(t, js, kvstore.Config{Bucket: bucket, Partitions: 16})
		mustCreate(t, s, newTask("kept"))
		_, err := kvstore.OpenJetStore(ctx, js, kvstore.Config{Bucket: bucket, Partitions: 8})
		if !errors.Is(err, kvstore.ErrPartitions) || !strings.Contains(err.Error(), "16") || !strings.Contains(err.Error(), "8") {
			t.Fatalf("open with 8 partitions: %v, want ErrPartitions naming 16 and 8", err)
		}
		// The refused open changed nothing.
		again := openJetStore(t, js, kvstore.Config{Bucket: bucket, Partitions: 16})
		mustGet(t, again, "kept")
	})

	t.Run("ForeignBucket", func(t *testing.T) {
		bucket := newBucketName()
		if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket}); err != nil {
			t.Fatal(err)
		}
		if _, err := kvstore.OpenJetStore(ctx, js, kvstore.Config{Bucket: bucket}); !errors.Is(err, kvstore.ErrPartitions) {
			t.Fatalf("open a bucket without partition metadata: %v, want ErrPartitions", err)
		}
	})

	t.Run("BucketConfig", func(t *testing.T) {
		s := openJetStore(t, js, kvstore.Config{Bucket: newBucketName(), Partitions: 4})
		checkBucketConfig(t, js, s.Bucket(), 4, 1)
	})

	t.Run("ConcurrentOpen", func(t *testing.T) {
		// Replicas starting together: all of them open the same bucket, none fails.
		bucket := newBucketName()
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() {
				s, err := kvstore.OpenJetStore(ctx, js, kvstore.Config{Bucket: bucket})
				if err == nil {
					s.Close()
				}
				errs[i] = err
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("LastRevision", func(t *testing.T) {
		// The leader's last revision per partition filter, which Watch waits for before InitDone.
		s := openJetStore(t, js, kvstore.Config{Bucket: newBucketName(), Partitions: 4})
		if rev, err := kvstore.LastRevisionForTest(ctx, s, ">"); err != nil || rev != 0 {
			t.Fatalf("empty bucket: %d, %v", rev, err)
		}
		last := map[int]uint64{}
		var all uint64
		for i := range 20 {
			id := fmt.Sprintf("last-%d", i)
			e := mustCreate(t, s, newTask(id))
			last[kvstore.Partition(id, 4)], all = e.Revision, e.Revision
		}
		for p := range 4 {
			if rev, err := kvstore.LastRevisionForTest(ctx, s, kvstore.PartitionFilter(p)); err != nil || rev != last[p] {
				t.Errorf("partition %d: %d, %v; want %d", p, rev, err, last[p])
			}
		}
		if rev, err := kvstore.LastRevisionForTest(ctx, s, ">"); err != nil || rev != all {
			t.Errorf("all: %d, %v; want %d", rev, err, all)
		}
	})

	t.Run("APIPrefixWithoutDot", func(t *testing.T) {
		// nats.go adds the missing dot to a custom API prefix; the store's own requests (Get's
		// stream message get) must too.
		pjs, err := jetstream.NewWithAPIPrefix(natstest.Connect(t, srv.ClientURL()), "$JS.API")
		if err != nil {
			t.Fatal(err)
		}
		s := openJetStore(t, pjs, kvstore.Config{Bucket: newBucketName()})
		mustCreate(t, s, newTask("prefixed"))
		mustGet(t, s, "prefixed")
	})
}

func checkBucketConfig(t *testing.T, js jetstream.JetStream, bucket string, partitions, replicas int) {
	t.Helper()
	ctx := testContext(t)
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config
	if cfg.Storage != jetstream.FileStorage || cfg.MaxMsgsPerSubject != 1 || cfg.MaxAge != 0 ||
		!cfg.AllowMsgTTL || cfg.SubjectDeleteMarkerTTL != kvstore.DefaultMarkerTTL || cfg.Replicas != replicas ||
		!cfg.AllowRollup || cfg.Description == "" ||
		cfg.Metadata[kvstore.MetaPartitions] != fmt.Sprint(partitions) {
		t.Fatalf("bucket stream config %+v", cfg)
	}
}

func TestJetStoreRestart(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	cfg := kvstore.Config{Bucket: newBucketName(), Partitions: 4}
	{
		nc := natstest.Connect(t, srv.ClientURL())
		js, _ := jetstream.New(nc)
		s := openJetStore(t, js, cfg)
		e := mustCreate(t, s, newTask("survivor"))
		task := newTask("survivor")
		task.Status = kvstore.StatusRunning
		if _, err := updateAsync(testContext(t), s, task, e.Revision); err != nil {
			t.Fatal(err)
		}
		gone := mustCreate(t, s, newTask("gone"))
		if err := s.Delete(testContext(t), "gone", gone.Revision); err != nil {
			t.Fatal(err)
		}
		s.Close()
		nc.Close()
	}
	srv.Restart(t)

	js := newJS(t, srv.ClientURL())
	s := openJetStore(t, js, cfg)
	if got := mustGet(t, s, "survivor"); got.Task.Status != kvstore.StatusRunning {
		t.Fatalf("after restart: %+v", got)
	}
	if _, err := s.Get(testContext(t), "gone"); !errors.Is(err, kvstore.ErrNotFound) {
		t.Fatalf("deleted record after restart: %v", err)
	}
	w, err := s.Watch(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	defer stopWatch(t, w)
	expectEvent(t, w, kvstore.EventPut, "survivor", 0)
	expectEvent(t, w, kvstore.EventInitDone, "", 0)
}

func TestJetStoreConnectionClosed(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc := natstest.Connect(t, srv.ClientURL())
	js, _ := jetstream.New(nc)
	s := openJetStore(t, js, kvstore.Config{Bucket: newBucketName()})
	ctx := context.Background() // only the store's default timeout bounds the ops

	w, err := s.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stopWatch(t, w)
	expectEvent(t, w, kvstore.EventInitDone, "", 0)

	// Writes in flight when the connection closes: every done is called once, success or not.
	const n = 200
	var wg sync.WaitGroup
	var calls atomic.Int64
	for i := range n {
		wg.Add(1)
		s.CreateAsync(ctx, newTask(fmt.Sprintf("closing-%d", i)), func(_ kvstore.Entry, err error) {
			calls.Add(1)
			wg.Done()
		})
		if i == n/2 {
			nc.Close()
		}
	}
	waitGroup(t, &wg)
	if c := calls.Load(); c != n {
		t.Fatalf("done called %d times for %d ops", c, n)
	}
	if _, err := updateAsync(ctx, s, newTask("late"), 0); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("UpdateAsync on a closed connection: %v", err)
	}
	// The watch ends with the connection.
	for range w.Events() {
	}

	s.Close()
	if _, err := updateAsync(ctx, s, newTask("late"), 0); !errors.Is(err, kvstore.ErrClosed) {
		t.Fatalf("UpdateAsync after Close: %v, want ErrClosed", err)
	}
}

// A write that finds no stream to take it gets "no responders", as while a replicated bucket
// elects a leader. The store sends it again until the operation's deadline instead of giving up
// after nats.go's default two retries (half a second).
func TestJetStoreWriteWaitsForLeader(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	cfg := kvstore.Config{Bucket: newBucketName()}
	s := openJetStore(t, js, cfg)
	if err := js.DeleteStream(testContext(t), "KV_"+cfg.Bucket); err != nil {
		t.Fatal(err)
	}
	inMsgs := func() int64 {
		v, err := srv.NATS().Varz(nil)
		if err != nil {
			t.Fatal(err)
		}
		return v.InMsgs
	}
	before := inMsgs()
	done := make(chan error, 1)
	go func() {
		_, err := s.Create(testContext(t), newTask("patient"))
		done <- err
	}()
	// nats.go on its own sends a write three times; wait until the store has sent more.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(waitTimeout); inMsgs()-before < 6; {
		select {
		case err := <-done:
			t.Fatalf("Create gave up while the bucket had no stream: %v", err)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server saw %d writes in %v", inMsgs()-before, waitTimeout)
		}
	}
	openJetStore(t, js, cfg) // the bucket's stream again
	if err := <-done; err != nil {
		t.Fatalf("Create once the stream was back: %v", err)
	}
	if got := mustGet(t, s, "patient"); got.Task.ID != "patient" {
		t.Fatalf("got %+v", got)
	}
}

// Partitions 0 opens an existing bucket with its own count and creates a new one with
// DefaultPartitions; a count given explicitly must match an existing bucket's.
func TestJetStoreAdoptsPartitions(t *testing.T) {
	t.Parallel()
	js, err := jetstream.New(natstest.Connect(t, natstest.RunServer(t).ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	old, err := kvstore.OpenJetStore(ctx, js, kvstore.Config{Bucket: "OLD", Partitions: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	again, err := kvstore.OpenJetStore(ctx, js, kvstore.Config{Bucket: "OLD"})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if got := again.Partitions(); got != 16 {
		t.Errorf("existing bucket opened with 0: %d partitions, want 16", got)
	}
	if _, err := kvstore.OpenJetStore(ctx, js, kvstore.Config{Bucket: "OLD", Partitions: 60}); !errors.Is(err, kvstore.ErrPartitions) {
		t.Errorf("existing 16 opened with 60: %v, want ErrPartitions", err)
	}
	fresh, err := kvstore.OpenJetStore(ctx, js, kvstore.Config{Bucket: "NEW"})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if got := fresh.Partitions(); got != 60 {
		t.Errorf("new bucket: %d partitions, want 60", got)
	}
}
