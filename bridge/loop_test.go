package bridge

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/axbridge/axbridge/internal/faultstore"
	"github.com/axbridge/axbridge/kvstore"
)

// value reads a gauge or counter.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if c := d.GetCounter(); c != nil {
		return c.GetValue()
	}
	return d.GetGauge().GetValue()
}

// reads is how many store reads the bridge has made.
func reads(fs *faultstore.Store) int {
	return fs.Calls(faultstore.OpGet) + fs.Calls(faultstore.OpGetMany)
}

// A wall clock stepped 1h ahead holds nothing back: a task due 2s after the step (by the stepped
// clock) fires about 2s later, not an hour later, and one that was due 2s after the old reading is
// overdue by the new one and fires at once; neither fires early by the bridge's clock.
func TestClockStepForward(t *testing.T) {
	t.Parallel()
	e := newLoopEnv(t, Config{})
	fires := e.consume(4)
	e.start(nil)
	e.create("before", e.clock.in(2*time.Second))
	e.clock.step(time.Hour)
	e.create("after", e.clock.in(2*time.Second))
	seen := map[string]fire{}
	for range 2 {
		f := next(t, fires, 10*time.Second)
		neverEarly(t, f)
		seen[f.id] = f
	}
	if _, ok := seen["before"]; !ok {
		t.Errorf("fired %v, want before and after", seen)
	}
	if _, ok := seen["after"]; !ok {
		t.Errorf("fired %v, want before and after", seen)
	}
}

// A wall clock stepped 1h back makes nothing spin: a task that was due 1.5s after the old reading
// waits for the new clock to get there, costing no store read and no fire meanwhile (the old loop
// re-dispatched it without end); when the clock is stepped forward again it fires, not early.
func TestClockStepBackward(t *testing.T) {
	t.Parallel()
	e := newLoopEnv(t, Config{})
	fires := e.consume(4)
	e.start(nil)
	e.create("parked", e.clock.in(1500*time.Millisecond))
	e.clock.step(-time.Hour)
	e.create("marker", e.clock.in(2500*time.Millisecond)) // due 1s after "parked" was, in real time
	f := next(t, fires, 10*time.Second)
	neverEarly(t, f)
	if f.id != "marker" {
		t.Fatalf("fired %s first, want marker: parked is due in an hour by the bridge clock", f.id)
	}
	if n := reads(e.fs); n > 3 {
		t.Errorf("%d store reads for one fire: the parked task spins", n)
	}
	if en, err := e.mem.Get(context.Background(), "parked"); err != nil || en.Task.Status != kvstore.StatusWaiting || en.Task.Attempt != 0 {
		t.Errorf("parked: %+v, %v; want WAITING at attempt 0", en.Task, err)
	}
	e.clock.step(time.Hour)
	f = next(t, fires, 10*time.Second)
	neverEarly(t, f)
	if f.id != "parked" {
		t.Errorf("fired %s, want parked", f.id)
	}
}

// Due times at the far end of int64 (NakWithDelay(math.MaxInt64) gives now + 292 years, beyond
// time.Duration's reach from the epoch; year 2262; math.MaxInt64 ms) neither overflow nor spin:
// while a marker task fires, they cost no read and no fire.
func TestFarDueTimesNeitherOverflowNorSpin(t *testing.T) {
	t.Parallel()
	e := newLoopEnv(t, Config{})
	fires := e.consume(4)
	e.start(nil)
	e.create("nak-max", e.clock.ms()+int64(math.MaxInt64/time.Millisecond))
	e.create("y2262", time.Date(2262, 4, 12, 0, 0, 0, 0, time.UTC).UnixMilli())
	e.create("max", math.MaxInt64)
	e.create("marker", e.clock.in(2500*time.Millisecond)) // past the pre-read window
	f := next(t, fires, 10*time.Second)
	if f.id != "marker" {
		t.Fatalf("fired %s, want marker", f.id)
	}
	if n := reads(e.fs); n > 2 {
		t.Errorf("%d store reads for one fire: a far task spins", n)
	}
	for _, id := range []string{"nak-max", "y2262", "max"} {
		if en, err := e.mem.Get(context.Background(), id); err != nil || en.Task.Status != kvstore.StatusWaiting {
			t.Errorf("%s: %+v, %v; want WAITING", id, en.Task, err)
		}
	}
}

// Another replica's lease is expired only LeaseSkew after its LeaseUntil by this bridge's clock.
func TestLeaseOfAnotherReplicaExpiresAfterSkew(t *testing.T) {
	t.Parallel()
	e := newLoopEnv(t, Config{LeaseSkew: time.Second})
	e.start(nil)
	until := e.clock.in(200 * time.Millisecond)
	e.createRunning("leased", "r-other", until)
	var en kvstore.Entry
	var err error
	if !checkFor(10*time.Second, func() bool {
		en, err = e.mem.Get(context.Background(), "leased")
		return err == nil && en.Task.Status == kvstore.StatusWaiting
	}) {
		t.Fatalf("lease not expired: %+v, %v", en.Task, err)
	}
	if en.Task.UpdatedAt < until+1000 {
		t.Errorf("expired at %d, %d ms after LeaseUntil; want at least the 1000 ms skew", en.Task.UpdatedAt, en.Task.UpdatedAt-until)
	}
}

// The owner of a lease expires it at LeaseUntil, without the skew margin others wait for.
func TestOwnLeaseExpiresWithoutSkew(t *testing.T) {
	t.Parallel()
	e := newLoopEnv(t, Config{ReplicaID: "r-self", LeaseSkew: time.Hour})
	e.start(nil)
	e.createRunning("mine", "r-self", e.clock.in(200*time.Millisecond))
	if !checkFor(10*time.Second, func() bool {
		en, err := e.mem.Get(context.Background(), "mine")
		return err == nil && en.Task.Status == kvstore.StatusWaiting
	}) {
		t.Fatal("own lease not expired: the owner waited for the skew margin")
	}
}

// When the task watch ends and starting it again hangs and fails for a while, the loop keeps
// firing what it has indexed, on time; a task created during the outage fires once the watch
// runs again; the restart is counted once.
func TestRewatchDoesNotBlockTheLoop(t *testing.T) {
	t.Parallel()
	e := newLoopEnv(t, Config{WatchTimeout: 200 * time.Millisecond})
	fires := e.consume(4)
	b := e.start(nil)
	e.create("indexed", e.clock.in(1500*time.Millisecond))
	if !checkFor(5*time.Second, func() bool { return value(t, b.m.pending) == 1 }) {
		t.Fatal("task not indexed")
	}
	e.fs.Inject(faultstore.Rule{Op: faultstore.OpWatch, Mode: faultstore.Hang, Times: 2})
	e.fs.Inject(faultstore.Rule{Op: faultstore.OpWatch, Mode: faultstore.FailBefore})
	e.fs.EndWatches()
	if !checkFor(5*time.Second, func() bool { return value(t, b.m.loop.watchUp) == 0 }) {
		t.Fatal("the loop did not notice the watch end")
	}
	e.create("during", e.clock.ms())
	f := next(t, fires, 10*time.Second)
	neverEarly(t, f)
	if f.id != "indexed" {
		t.Fatalf("fired %s, want indexed", f.id)
	}
	if up := value(t, b.m.loop.watchUp); up != 0 {
		t.Fatal("the watch came back before the indexed task fired: the test proves nothing")
	}
	if n := e.fs.Calls(faultstore.OpWatch); n < 3 {
		t.Errorf("%d watch starts, want the first and at least 2 failed ones", n)
	}
	e.fs.Clear()
	f = next(t, fires, 10*time.Second)
	neverEarly(t, f)
	if f.id != "during" {
		t.Errorf("fired %s, want during", f.id)
	}
	if n := value(t, b.m.loop.watchRestarts); n != 1 {
		t.Errorf("ax_watch_restarts_total %v, want 1", n)
	}
}

// A watch event that never arrives (the cause of a task stuck WAITING) is repaired by the
// reconciler: the task fires, and the repair is counted.
func TestReconcilerRepairsAMissedEvent(t *testing.T) {
	t.Parallel()
	e := newLoopEnv(t, Config{ReconcileInterval: 300 * time.Millisecond, ReconcileGrace: 100 * time.Millisecond})
	fires := e.consume(4)
	b := e.start(nil)
	e.fs.Inject(faultstore.Rule{Op: faultstore.OpEvent, ID: "lost", Mode: faultstore.Drop, Times: 1})
	e.create("lost", e.clock.in(100*time.Millisecond))
	f := next(t, fires, 10*time.Second)
	neverEarly(t, f)
	if f.id != "lost" {
		t.Fatalf("fired %s, want lost", f.id)
	}
	if n := value(t, b.m.loop.repairs.WithLabelValues("waiting")); n != 1 {
		t.Errorf("ax_reconcile_repairs_total{kind=waiting} %v, want 1", n)
	}
}

// A RUNNING record whose watch event never arrived is found by the reconciler once its lease is
// over: its lease is expired (the attempt counts as failed) and the repair is counted as running.
func TestReconcilerRepairsAMissedLease(t *testing.T) {
	t.Parallel()
	e := newLoopEnv(t, Config{ReconcileInterval: 300 * time.Millisecond, ReconcileGrace: 100 * time.Millisecond})
	b := e.start(nil)
	e.fs.Inject(faultstore.Rule{Op: faultstore.OpEvent, ID: "lost-run", Mode: faultstore.Drop, Times: 1})
	e.createRunning("lost-run", b.ReplicaID(), e.clock.in(100*time.Millisecond))
	if !checkFor(10*time.Second, func() bool {
		en, err := e.mem.Get(context.Background(), "lost-run")
		return err == nil && en.Task.Status == kvstore.StatusWaiting
	}) {
		t.Fatal("the missed lease was never expired")
	}
	if n := value(t, b.m.loop.repairs.WithLabelValues("running")); n != 1 {
		t.Errorf("ax_reconcile_repairs_total{kind=running} %v, want 1", n)
	}
}

// A backlog of 50,000 tasks at start (10,000 under the race detector), half of them overdue and
// half due a few seconds later, within 1 s of one another, is fired completely while the loop's
// job queues and pre-read cache stay within their bounds; the reconciler, running all along,
// repairs nothing. The overdue half fills the fire queue; the later half is pre-read (or kept
// from the watch) before it is due, so the pre-read cache reaches its bound whatever the timing.
func TestBacklogStaysWithinBounds(t *testing.T) {
	t.Parallel()
	n := 50_000
	if raceEnabled {
		n = 10_000
	}
	e := newLoopEnv(t, Config{MaxPreReadTasks: 100, MaxPreReadBytes: 20_000,
		ReconcileInterval: time.Second, ReconcileGrace: 100 * time.Millisecond})
	overdue, later := e.clock.ms()-1000, e.clock.ms()+4000
	for i := range n {
		due := overdue
		if i >= n/2 {
			due = later
		}
		e.create(fmt.Sprintf("b-%05d", i), due+int64(i%1000))
	}
	fires := e.consumeAck(2*n, false) // acks would add a write per task and prove nothing more here
	var peakQueued, peakNear, peakBytes atomic.Int64
	peak := func(p *atomic.Int64, v int) {
		for {
			old := p.Load()
			if int64(v) <= old || p.CompareAndSwap(old, int64(v)) {
				return
			}
		}
	}
	b := e.start(func(s loopStats) {
		peak(&peakQueued, s.queued)
		peak(&peakNear, s.preRead)
		peak(&peakBytes, s.preReadBytes)
	})
	seen := make(map[string]bool, n)
	deadline := time.After(5 * time.Minute) // a hang guard, not a speed bar
	for len(seen) < n {
		select {
		case f := <-fires:
			neverEarly(t, f)
			seen[f.id] = true
		case <-deadline:
			t.Fatalf("%d of %d tasks fired", len(seen), n)
		}
	}
	if q := peakQueued.Load(); q > 2*maxQueued {
		t.Errorf("peak queued jobs %d, over the bound %d", q, 2*maxQueued)
	}
	if q := peakNear.Load(); q > 100 {
		t.Errorf("peak pre-read records %d, over the bound 100", q)
	}
	if q := peakBytes.Load(); q > 20_000 {
		t.Errorf("peak pre-read bytes %d, over the bound 20000", q)
	}
	if peakQueued.Load() == 0 || peakNear.Load() == 0 {
		t.Errorf("peaks queued %d, pre-read %d: the bounds were never approached", peakQueued.Load(), peakNear.Load())
	}
	for _, kind := range []string{"waiting", "running"} {
		if r := value(t, b.m.loop.repairs.WithLabelValues(kind)); r != 0 {
			t.Errorf("ax_reconcile_repairs_total{kind=%s} %v in a healthy run, want 0", kind, r)
		}
	}
}

// Tasks that cannot be claimed (the store refuses every write) are overdue and show as such, with
// the age of the oldest; once they fire, the gauge is back to zero.
func TestOverdueGauges(t *testing.T) {
	t.Parallel()
	e := newLoopEnv(t, Config{})
	fires := e.consume(8)
	b := e.start(nil)
	e.fs.Inject(faultstore.Rule{Op: faultstore.OpUpdate, Mode: faultstore.FailBefore})
	for i := range 3 {
		e.create(fmt.Sprintf("late-%d", i), e.clock.ms()-5000)
	}
	if !checkFor(10*time.Second, func() bool {
		return value(t, b.m.loop.overdue) == 3 && value(t, b.m.loop.oldestOverdue) >= 5
	}) {
		t.Fatalf("ax_tasks_overdue %v, ax_oldest_overdue_seconds %v; want 3 and at least 5",
			value(t, b.m.loop.overdue), value(t, b.m.loop.oldestOverdue))
	}
	e.fs.Clear()
	for range 3 {
		next(t, fires, 10*time.Second)
	}
	if !checkFor(10*time.Second, func() bool {
		return value(t, b.m.loop.overdue) == 0 && value(t, b.m.loop.oldestOverdue) == 0
	}) {
		t.Errorf("ax_tasks_overdue %v, ax_oldest_overdue_seconds %v after the fires; want 0",
			value(t, b.m.loop.overdue), value(t, b.m.loop.oldestOverdue))
	}
}
