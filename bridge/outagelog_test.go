package bridge

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/axbridge/axbridge/internal/faultstore"
)

// countingHandler counts log records by message and passes them on.
type countingHandler struct {
	slog.Handler
	mu *sync.Mutex
	n  map[string][]slog.Record
}

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	h.n[r.Message] = append(h.n[r.Message], r.Clone())
	h.mu.Unlock()
	return h.Handler.Handle(ctx, r)
}

func (h countingHandler) records(msg string) []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[msg]
}

// A store outage that fails every claim for a while is logged once when it starts and once when
// it ends, with the number of failed calls, not once per task per retry.
func TestStoreOutageLogsOncePerChange(t *testing.T) {
	t.Parallel()
	h := countingHandler{Handler: slog.NewTextHandler(tWriter{t}, nil), mu: new(sync.Mutex), n: map[string][]slog.Record{}}
	e := newLoopEnv(t, Config{Logger: slog.New(h)})
	fires := e.consume(8)
	e.start(nil)
	e.fs.Inject(faultstore.Rule{Op: faultstore.OpUpdate, Mode: faultstore.FailBefore})
	for i := range 5 {
		e.create(fmt.Sprintf("o-%d", i), e.clock.ms())
	}
	// Each task's claim is tried a few times in a row, then put back for a second: wait for two
	// such rounds of all five.
	if !checkFor(10*time.Second, func() bool { return e.fs.Calls(faultstore.OpUpdate) >= 30 }) {
		t.Fatalf("%d claims tried, want the 5 tasks retried", e.fs.Calls(faultstore.OpUpdate))
	}
	e.fs.Clear()
	for range 5 {
		next(t, fires, 10*time.Second)
	}
	if !checkFor(5*time.Second, func() bool { return len(h.records("task store calls succeed again")) > 0 }) {
		t.Fatal("the end of the outage was not logged")
	}
	if n := len(h.records("task store calls failing; the tasks will be retried")); n != 1 {
		t.Errorf("outage start logged %d times, want once", n)
	}
	end := h.records("task store calls succeed again")
	if len(end) != 1 {
		t.Fatalf("outage end logged %d times, want once", len(end))
	}
	end[0].Attrs(func(a slog.Attr) bool {
		if a.Key == "failures" && a.Value.Int64() < 10 {
			t.Errorf("outage end counts %d failed steps, want at least 10 (5 tasks, 2 rounds)", a.Value.Int64())
		}
		return true
	})
}
