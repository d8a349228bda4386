package kvstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// benchKeys is the number of records the update benchmarks cycle through.
const benchKeys = 1000

// benchStore opens a JetStore on a fresh embedded server (file storage, default sync interval).
func benchStore(b *testing.B) *kvstore.JetStore {
	b.Helper()
	srv := natstest.RunServer(b)
	nc := natstest.Connect(b, srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	s, err := kvstore.OpenJetStore(context.Background(), js, kvstore.Config{Bucket: "BENCH", Timeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func reportOps(b *testing.B, start time.Time) {
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}

// BenchmarkJetStoreUpdate: b.N CAS updates over benchKeys records, one round trip at a time
// (Update) or pipelined a round of benchKeys at a time (UpdateAsync).
func BenchmarkJetStoreUpdate(b *testing.B) {
	setup := func(b *testing.B) (*kvstore.JetStore, []*kvstore.Task, []uint64) {
		s := benchStore(b)
		tasks := make([]*kvstore.Task, benchKeys)
		revs := make([]uint64, benchKeys)
		for i := range tasks {
			tasks[i] = newTask(fmt.Sprintf("bench-%d", i))
			e, err := s.Create(context.Background(), tasks[i])
			if err != nil {
				b.Fatal(err)
			}
			revs[i] = e.Revision
		}
		return s, tasks, revs
	}
	b.Run("sequential", func(b *testing.B) {
		s, tasks, revs := setup(b)
		ctx := context.Background()
		b.ResetTimer()
		start := time.Now()
		for i := range b.N {
			k := i % benchKeys
			tasks[k].Attempt++
			rev, err := s.Update(ctx, tasks[k], revs[k])
			if err != nil {
				b.Fatal(err)
			}
			revs[k] = rev
		}
		reportOps(b, start)
	})
	b.Run("async", func(b *testing.B) {
		s, tasks, revs := setup(b)
		ctx := context.Background()
		var firstErr error
		var mu sync.Mutex
		b.ResetTimer()
		start := time.Now()
		for done := 0; done < b.N; {
			round := min(benchKeys, b.N-done)
			var wg sync.WaitGroup
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
	})
}

// BenchmarkJetStoreCreate: b.N creates of new records, sequential or pipelined.
func BenchmarkJetStoreCreate(b *testing.B) {
	b.Run("sequential", func(b *testing.B) {
		s := benchStore(b)
		ctx := context.Background()
		tasks := benchTasks(b.N)
		b.ResetTimer()
		start := time.Now()
		for _, t := range tasks {
			if _, err := s.Create(ctx, t); err != nil {
				b.Fatal(err)
			}
		}
		reportOps(b, start)
	})
	b.Run("async", func(b *testing.B) {
		s := benchStore(b)
		ctx := context.Background()
		tasks := benchTasks(b.N)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		b.ResetTimer()
		start := time.Now()
		wg.Add(len(tasks))
		for _, t := range tasks {
			s.CreateAsync(ctx, t, func(_ kvstore.Entry, err error) {
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
				wg.Done()
			})
		}
		wg.Wait()
		reportOps(b, start)
		if firstErr != nil {
			b.Fatal(firstErr)
		}
	})
}

func benchTasks(n int) []*kvstore.Task {
	tasks := make([]*kvstore.Task, n)
	for i := range tasks {
		tasks[i] = newTask(fmt.Sprintf("create-%d", i))
	}
	return tasks
}
