package kvstore_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/procs"
	"github.com/axbridge/axbridge/kvstore"
)

// BenchmarkWatchLoadCluster: one op is a watch of -load-partitions partitions (0: all) of a bucket
// on a 3-node cluster of nats-server subprocesses (sync always, R3), until EventInitDone. The
// bucket holds -load-records records, each created and then claimed (RUNNING), as a bridge's
// writes leave them: every key has an older revision removed behind it.
func BenchmarkWatchLoadCluster(b *testing.B) {
	ctx := context.Background()
	bin, err := procs.BuildServer(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	c, err := procs.Start(ctx, bin, b.TempDir(), procs.Options{Nodes: 3, Sync: "always"})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	nc, err := nats.Connect(c.URL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	s, err := kvstore.OpenJetStore(ctx, js, kvstore.Config{Bucket: "LOAD", Replicas: 3, Timeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	n := *loadRecords
	now := time.Now().UnixMilli()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 500)
	for i := range n {
		t := &kvstore.Task{ID: "t-" + strconv.Itoa(i), BizType: "chaos", Payload: []byte(`{"order":42}`),
			Status: kvstore.StatusWaiting, DueAt: now, MaxRetry: 3, AckWait: 4 * time.Second, CreatedAt: now, UpdatedAt: now}
		sem <- struct{}{}
		wg.Add(1)
		s.CreateAsync(ctx, t, func(e kvstore.Entry, err error) {
			if err != nil {
				b.Error(err)
				<-sem
				wg.Done()
				return
			}
			u := e.Task
			u.Status = kvstore.StatusRunning
			s.UpdateAsync(ctx, &u, e.Revision, func(_ uint64, err error) {
				if err != nil {
					b.Error(err)
				}
				<-sem
				wg.Done()
			})
		})
	}
	wg.Wait()
	parts := loadPartitions()
	b.ResetTimer()
	start := time.Now()
	loaded := 0
	for range b.N {
		t0 := time.Now()
		got := loadOnce(b, s, parts)
		loaded += got
		b.Logf("%d records loaded in %v", got, time.Since(t0))
	}
	b.ReportMetric(float64(loaded)/time.Since(start).Seconds(), "records/s")
}
