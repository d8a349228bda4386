package kvstore_test

import (
	"context"
	"flag"
	"os"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// loadRecords is how many records BenchmarkWatchLoad loads (go test -bench WatchLoad -load-records 1000000).
var (
	loadRecords = flag.Int("load-records", 100_000, "records in the bucket BenchmarkWatchLoad loads")
	loadParts   = flag.Int("load-partitions", 0, "partitions BenchmarkWatchLoad watches, the first of the bucket's 60 (0: all, one filter)")
	loadRevs    = flag.Int("load-revisions", 1, "messages written per record before its last, as a task's claim and ack leave behind")
	loadProfile = flag.String("load-cpuprofile", "", "file for a CPU profile of BenchmarkWatchLoad's loads alone (not the filling)")
)

// BenchmarkWatchLoad: one op is a watch of every partition of a bucket of -load-records WAITING
// records, from its start until EventInitDone, the initial load of a bridge's restart. The server
// is embedded, so a CPU profile shows its side too.
func BenchmarkWatchLoad(b *testing.B) {
	n := *loadRecords
	srv := natstest.RunServer(b)
	nc := natstest.Connect(b, srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	s, err := kvstore.OpenJetStore(ctx, js, kvstore.Config{Bucket: "LOAD", Timeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for range *loadRevs {
		fillBucket(b, js, "LOAD", kvstore.DefaultPartitions, n)
	}
	parts := loadPartitions()
	want := n
	if len(parts) > 0 {
		want = 0
		for i := range n {
			if kvstore.Partition("far-"+strconv.Itoa(i), kvstore.DefaultPartitions) < len(parts) {
				want++
			}
		}
	}
	if *loadProfile != "" {
		f, err := os.Create(*loadProfile)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	for range b.N {
		if got := loadOnce(b, s, parts); got != want {
			b.Fatalf("loaded %d records, want %d", got, want)
		}
	}
	b.ReportMetric(float64(want*b.N)/time.Since(start).Seconds(), "records/s")
	// CPU time (server and client, both in this process) tells more than the wall clock on a
	// machine shared with other work.
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(want*b.N), "cpu-ns/record")
}

// loadPartitions is the watch of -load-partitions: its first partitions, or nil for all.
func loadPartitions() []int {
	var parts []int
	for p := range *loadParts {
		parts = append(parts, p)
	}
	return parts
}

// loadOnce watches parts of s until EventInitDone and returns how many records it loaded.
func loadOnce(b *testing.B, s *kvstore.JetStore, parts []int) int {
	b.Helper()
	w, err := s.Watch(context.Background(), parts...)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	got := 0
	for ev := range w.Events() {
		if ev.Kind == kvstore.EventInitDone {
			break
		}
		if ev.Kind != kvstore.EventPut {
			b.Fatalf("event %v: %v", ev.Kind, ev.Err)
		}
		got++
	}
	return got
}

// fillBucket writes n WAITING records shaped as the bridge's intake writes them (bench's payload
// and default policy) straight to the bucket's stream, pipelined.
func fillBucket(b *testing.B, js jetstream.JetStream, bucket string, partitions, n int) {
	b.Helper()
	ctx := context.Background()
	now := time.Now().UnixMilli()
	for i := range n {
		id := "far-" + strconv.Itoa(i)
		t := &kvstore.Task{
			ID: id, BizType: "far", Payload: []byte(`{"order":42,"note":"close if unpaid"}`),
			Status: kvstore.StatusWaiting, DueAt: now + 3600_000 + int64(i), MaxRetry: 3, AckWait: 10 * time.Second,
			Backoff:   []time.Duration{10 * time.Second, 30 * time.Second, 60 * time.Second},
			CreatedAt: now, UpdatedAt: now,
			Fingerprint: "sha256:9f2c5b1e0d7a3c4b6e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d",
		}
		val, err := kvstore.EncodeTask(t)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := js.PublishAsync("$KV."+bucket+"."+kvstore.Key(id, partitions), val); err != nil {
			b.Fatal(err)
		}
		// Fewer in flight than nats.go's limit of pending async publishes (4,000), past which a
		// slow server makes PublishAsync fail instead of wait.
		if i%2_000 == 1_999 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				b.Fatal("publish: no acks within a minute")
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
	case <-time.After(time.Minute):
		b.Fatal("publish: no acks within a minute")
	}
}
