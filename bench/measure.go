package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// fires records what a consumer received, per task id, from any goroutine: how often each task
// fired, its lateness against the due time the firing side announced and against the due time the
// client meant, early fires, and the last receive time.
type fires struct {
	mu         sync.Mutex
	count      map[string]int
	late       []time.Duration // receive − announced due (Ax-Due-At, or the native schedule's @at)
	dues       []time.Time     // the announced due time of each of late
	lateClient []time.Duration // receive − the due time the client meant, by its own clock
	early      int             // received before the announced due time
	last       time.Time
}

func newFires() *fires { return &fires{count: make(map[string]int)} }

// add records one fire of id received at now. due is the announced due time (zero: none);
// meant is the client's intended due time (zero: not tracked).
func (f *fires) add(id string, now, due, meant time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count[id]++
	if !due.IsZero() {
		f.late, f.dues = append(f.late, now.Sub(due)), append(f.dues, due)
		if now.Before(due) {
			f.early++
		}
	}
	if !meant.IsZero() {
		f.lateClient = append(f.lateClient, now.Sub(meant))
	}
	f.last = now
}

// lateBySplit is the lateness of the fires announced due before split, and of those due from it.
func (f *fires) lateBySplit(split time.Time) (before, from []time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, d := range f.late {
		if f.dues[i].Before(split) {
			before = append(before, d)
		} else {
			from = append(from, d)
		}
	}
	return before, from
}

// distinct is how many different tasks fired.
func (f *fires) distinct() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.count)
}

// lastAt is the receive time of the latest fire.
func (f *fires) lastAt() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// check reports lost (of the n scheduled, how many never fired) and early fires.
func (f *fires) check(n int) (lost, early int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return max(0, n-len(f.count)), f.early
}

// percentiles returns p50, p99 and max of d in milliseconds (d is sorted in place).
func percentiles(d []time.Duration) (p50, p99, pmax float64, ok bool) {
	if len(d) == 0 {
		return 0, 0, 0, false
	}
	slices.Sort(d)
	ms := func(x time.Duration) float64 { return float64(x) / float64(time.Millisecond) }
	return ms(d[len(d)/2]), ms(d[len(d)*99/100]), ms(d[len(d)-1]), true
}

// streamTotals is, summed over every stream of the account, the last sequence (messages ever
// appended) and the messages held now.
type streamTotals struct{ appended, held uint64 }

func totals(ctx context.Context, js jetstream.JetStream) (streamTotals, error) {
	var t streamTotals
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		t.appended += info.State.LastSeq
		t.held += info.State.Msgs
	}
	if err := l.Err(); err != nil {
		return t, fmt.Errorf("list streams: %w", err)
	}
	return t, nil
}

// writes is what changed between two totals: appends (each a stored message) and removals
// (messages appended and then removed: work-queue acks, purges, deletes of fired schedules).
func writes(before, after streamTotals) (appends, removals float64) {
	appends = float64(after.appended - before.appended)
	removals = appends - (float64(after.held) - float64(before.held))
	return appends, removals
}

// gaugeValue is the summed value of the metric family name in reg, and whether it exists.
func gaugeValue(reg *prometheus.Registry, name string) (float64, bool) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, false
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			}
		}
		return sum, true
	}
	return 0, false
}
