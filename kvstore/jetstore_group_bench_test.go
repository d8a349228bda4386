package kvstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// BenchmarkJetStoreGroupedUpdate: rounds of benchKeys pipelined CAS updates (UpdateAsync, as the
// bridge claims a burst), with writes grouped by group commit into batches of at most BatchMax
// (1: each write on its own) with up to inflight sends unanswered, on one server or an R3 bucket
// on 3, with the default sync interval and with sync_interval: always.
//
//	go test -run '^$' -bench JetStoreGroupedUpdate -benchtime 3000x ./kvstore/
func BenchmarkJetStoreGroupedUpdate(b *testing.B) {
	for _, nodes := range []int{1, 3} {
		for _, sync := range []string{"default", "always"} {
			for _, batchMax := range []int{1, 1000} {
				for _, inflight := range []int64{1, 4, 16} {
					if batchMax == 1 && inflight > 1 {
						continue // no grouper
					}
					b.Run(fmt.Sprintf("nodes=%d/sync=%s/batch=%d/inflight=%d", nodes, sync, batchMax, inflight), func(b *testing.B) {
						defer kvstore.SetCommitInFlightForTest(inflight)()
						benchGroupedUpdate(b, nodes, sync == "always", batchMax)
					})
				}
			}
		}
	}
}

func benchGroupedUpdate(b *testing.B, nodes int, syncAlways bool, batchMax int) {
	opt := func(o *server.Options) { o.SyncAlways = syncAlways }
	var url string
	if nodes == 1 {
		url = natstest.RunServer(b, opt).ClientURL()
	} else {
		url = natstest.RunCluster(b, nodes, opt).ClientURLs()
	}
	js, err := jetstream.New(natstest.Connect(b, url))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	s, err := kvstore.OpenJetStore(ctx, js, kvstore.Config{Bucket: "BENCH", Timeout: time.Minute, BatchMax: batchMax, Replicas: nodes})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	tasks := make([]*kvstore.Task, benchKeys)
	revs := make([]uint64, benchKeys)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	wg.Add(benchKeys)
	for i := range tasks {
		tasks[i] = newTask(fmt.Sprintf("bench-%d", i))
		s.CreateAsync(ctx, tasks[i], func(e kvstore.Entry, err error) {
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
			revs[i] = e.Revision
			wg.Done()
		})
	}
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	before := s.WriteStats()
	b.ResetTimer()
	start := time.Now()
	for done := 0; done < b.N; {
		round := min(benchKeys, b.N-done)
		wg.Add(round)
		for k := range round {
			tasks[k].Attempt++
			s.UpdateAsync(ctx, tasks[k], revs[k], func(rev uint64, err error) {
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
				revs[k] = rev
				wg.Done()
			})
		}
		wg.Wait()
		if firstErr != nil {
			b.Fatal(firstErr)
		}
		done += round
	}
	reportOps(b, start)
	st := s.WriteStats()
	if n := st.Batches - before.Batches; n > 0 {
		b.ReportMetric(float64(st.BatchedWrites-before.BatchedWrites)/float64(n), "writes/batch")
	}
}
