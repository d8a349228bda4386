package bridge

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axbridge/axbridge/internal/faultstore"
	"github.com/axbridge/axbridge/kvstore"
)

// aheadEnv is a loopEnv whose bridge claims a second ahead (its claims are taken to have been
// slow, so the window stays at its bound), with the number of claims the loop holds for their due
// time.
type aheadEnv struct {
	*loopEnv
	held atomic.Int64
}

func newAheadEnv(t *testing.T) *aheadEnv {
	t.Helper()
	return &aheadEnv{loopEnv: newLoopEnv(t, Config{ClaimAhead: time.Second})}
}

func (e *aheadEnv) start() *Bridge {
	e.t.Helper()
	b := e.loopEnv.start(func(s loopStats) { e.held.Store(int64(s.held)) })
	for range claimSamples {
		b.fired.times.add(time.Second)
	}
	return b
}

// waitHeld waits until the loop holds n claimed tasks for their due time.
func (e *aheadEnv) waitHeld(n int) {
	e.t.Helper()
	if !checkFor(10*time.Second, func() bool { return e.held.Load() == int64(n) }) {
		e.t.Fatalf("the loop holds %d claims, want %d", e.held.Load(), n)
	}
}

func (e *aheadEnv) record(id string) kvstore.Entry {
	e.t.Helper()
	en, err := e.mem.Get(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return en
}

// noFire fails the test if a fire arrives on ch within d (after what should have stopped it).
func noFire(t *testing.T, ch <-chan fire, d time.Duration, why string) {
	t.Helper()
	select {
	case f := <-ch:
		t.Fatalf("%s: task %s fired (attempt %d)", why, f.id, f.attempt)
	case <-time.After(d):
	}
}

// A task is claimed ahead of its due time and fired by the loop at the due time, not before:
// the record is RUNNING before the fire, its lease counts from the due time, and the fire went
// out from the held claim (not from the claim's completion).
func TestClaimAheadFiresAtTheDueTime(t *testing.T) {
	t.Parallel()
	e := newAheadEnv(t)
	fires := e.consumeAck(2, false)
	b := e.start()
	due := e.clock.in(1500 * time.Millisecond)
	w := e.create("ahead-1", due)
	e.waitHeld(1)
	r := e.record("ahead-1")
	if r.Task.Status != kvstore.StatusRunning || r.Task.Claim != w.Revision || r.Task.LeaseUntil != due+30_000 {
		t.Fatalf("held record: %s claim %d lease until %d; want RUNNING claim %d lease until %d (due + ack wait)",
			r.Task.Status, r.Task.Claim, r.Task.LeaseUntil, w.Revision, due+30_000)
	}
	f := next(t, fires, 10*time.Second)
	neverEarly(t, f)
	if f.id != "ahead-1" || f.attempt != 1 {
		t.Fatalf("fired %s attempt %d, want ahead-1 attempt 1", f.id, f.attempt)
	}
	if !checkFor(5*time.Second, func() bool { return value(t, b.m.loop.heldFires) == 1 }) {
		t.Errorf("fires claimed ahead: %v, want 1", value(t, b.m.loop.heldFires))
	}
	if ahead := value(t, b.m.loop.claimAhead); ahead <= 0 || ahead > 1 {
		t.Errorf("claim-ahead window %vs, want within (0, 1s]", ahead)
	}
}

// A held claim waits for the wall clock: stepped an hour back after the claim, the task does not
// fire at its old due time by the monotonic clock, and fires once the clock is stepped forward.
func TestClaimAheadNeverEarlyAfterAClockStep(t *testing.T) {
	t.Parallel()
	e := newAheadEnv(t)
	fires := e.consume(2)
	e.start()
	due := e.clock.in(1500 * time.Millisecond)
	e.create("stepped", due)
	e.waitHeld(1)
	e.clock.step(-time.Hour)
	// Past the due time by the monotonic clock (the loop checks the clock at least every second).
	noFire(t, fires, time.Until(time.UnixMilli(due))+1500*time.Millisecond, "clock stepped back")
	e.clock.step(time.Hour)
	f := next(t, fires, 10*time.Second)
	neverEarly(t, f)
	if f.id != "stepped" || f.attempt != 1 {
		t.Fatalf("fired %s attempt %d, want stepped attempt 1", f.id, f.attempt)
	}
}

// A write to the record between the claim and the due time wins over the held fire: a record
// deleted, or rewritten by another writer, is not fired from the claim. A second task held due
// just after is the marker: the loop publishes held claims in due order, so when the marker has
// fired the dropped one would have.
func TestClaimAheadDroppedOnANewerWrite(t *testing.T) {
	t.Parallel()
	for _, change := range []string{"deleted", "rewritten"} {
		t.Run(change, func(t *testing.T) {
			t.Parallel()
			e := newAheadEnv(t)
			fires := e.consume(4)
			b := e.start()
			due := e.clock.in(1500 * time.Millisecond)
			e.create("changed", due)
			e.create("marker", due+100)
			e.waitHeld(2)
			r := e.record("changed")
			ctx := context.Background()
			switch change {
			case "deleted":
				if err := e.mem.Delete(ctx, "changed", r.Revision); err != nil {
					t.Fatal(err)
				}
			case "rewritten": // back to WAITING an hour later, as another writer might
				task := r.Task
				task.Status, task.DueAt, task.Attempt = kvstore.StatusWaiting, e.clock.in(time.Hour), 0
				task.LeaseUntil, task.Owner, task.Claim = 0, "", 0
				if _, err := e.mem.Update(ctx, &task, r.Revision); err != nil {
					t.Fatal(err)
				}
			}
			e.waitHeld(1)
			f := next(t, fires, 10*time.Second)
			if f.id != "marker" {
				t.Fatalf("fired %s attempt %d; want only the marker", f.id, f.attempt)
			}
			neverEarly(t, f)
			if !checkFor(5*time.Second, func() bool { return value(t, b.m.loop.heldFires) == 1 }) {
				t.Errorf("fires claimed ahead: %v, want 1 (the marker)", value(t, b.m.loop.heldFires))
			}
			if change == "rewritten" {
				if r := e.record("changed"); r.Task.Status != kvstore.StatusWaiting {
					t.Errorf("rewritten record is %s, want WAITING", r.Task.Status)
				}
			}
		})
	}
}

// Stop publishes the claims it holds when they come due (within the claim-ahead bound) before it
// returns, so a stop costs none of them an attempt.
func TestStopFiresHeldClaims(t *testing.T) {
	t.Parallel()
	e := newAheadEnv(t)
	fires := e.consumeAck(2, false)
	b := e.start()
	due := e.clock.in(800 * time.Millisecond)
	e.create("at-stop", due)
	e.waitHeld(1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	f := next(t, fires, 10*time.Second)
	neverEarly(t, f)
	if f.id != "at-stop" || f.attempt != 1 {
		t.Fatalf("fired %s attempt %d, want at-stop attempt 1", f.id, f.attempt)
	}
}

// A held claim that is not due by the end of Stop's drain (here the clock stepped an hour back)
// is not published after Stop returns: the record stays RUNNING under its lease, as after a crash.
func TestStopDoesNotFireHeldClaimsLater(t *testing.T) {
	t.Parallel()
	e := newAheadEnv(t)
	fires := e.consume(2)
	b := e.start()
	due := e.clock.in(1500 * time.Millisecond)
	e.create("after-stop", due)
	e.waitHeld(1)
	e.clock.step(-time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	e.clock.step(time.Hour)
	noFire(t, fires, time.Until(time.UnixMilli(due))+time.Second, "after Stop")
	if r := e.record("after-stop"); r.Task.Status != kvstore.StatusRunning || r.Task.LeaseUntil != due+30_000 {
		t.Errorf("record after Stop: %s lease until %d, want RUNNING until %d", r.Task.Status, r.Task.LeaseUntil, due+30_000)
	}
}

// A claim ahead whose outcome is unknown but that landed is fired once, at its due time, as
// attempt 1: the read-back (or the claim's own watch event) finds it, and the loop holds it.
func TestClaimAheadUnknownOutcome(t *testing.T) {
	t.Parallel()
	e := newAheadEnv(t)
	fires := e.consume(4)
	e.fs.Inject(faultstore.Rule{Op: faultstore.OpUpdate, ID: "unsure", Mode: faultstore.ApplyThenTimeout, Times: 1,
		Err: fmt.Errorf("update unsure: %w", context.DeadlineExceeded)})
	b := e.start()
	due := e.clock.in(1500 * time.Millisecond)
	e.create("unsure", due)
	e.waitHeld(1) // claimed, read back and held before its due time
	f := next(t, fires, 10*time.Second)
	neverEarly(t, f)
	if f.id != "unsure" || f.attempt != 1 {
		t.Fatalf("fired %s attempt %d, want unsure attempt 1", f.id, f.attempt)
	}
	// The counter moves after the publish returns, which may be after the consumer has the fire.
	if !checkFor(5*time.Second, func() bool { return value(t, b.m.loop.heldFires) == 1 }) {
		t.Errorf("fires claimed ahead: %v, want 1 (the landed claim, held until due)", value(t, b.m.loop.heldFires))
	}
	if !checkFor(10*time.Second, func() bool { return e.record("unsure").Task.Status == kvstore.StatusSuccess }) {
		t.Fatalf("record after the ack: %s", e.record("unsure").Task.Status)
	}
	noFire(t, fires, 500*time.Millisecond, "after the ack")
}

// The window is a few times the recent claims' p99 plus a millisecond, in whole milliseconds,
// within the bound: the whole bound before any claim is measured, none when the bound is off.
func TestClaimAheadWindow(t *testing.T) {
	t.Parallel()
	var c claimTimes
	if w := c.window(100 * time.Millisecond); w != 100*time.Millisecond {
		t.Errorf("window with no claims measured: %v, want the bound", w)
	}
	for range claimSamples {
		c.add(2 * time.Millisecond)
	}
	if w := c.window(100 * time.Millisecond); w != 7*time.Millisecond {
		t.Errorf("window for claims of 2ms: %v, want 7ms", w)
	}
	c.add(1500 * time.Microsecond) // one of 256 slower or faster does not move the p99 much
	if w := c.window(100 * time.Millisecond); w != 7*time.Millisecond {
		t.Errorf("window: %v, want 7ms", w)
	}
	for range claimSamples / 10 {
		c.add(50 * time.Millisecond)
	}
	if w := c.window(100 * time.Millisecond); w != 100*time.Millisecond {
		t.Errorf("window for slow claims: %v, want the bound", w)
	}
	if w := c.window(-1); w != 0 {
		t.Errorf("window when off: %v, want 0", w)
	}
	if err := (Config{ClaimAhead: 2 * time.Second}).Validate(); err == nil {
		t.Error("a claim-ahead bound of 2s validated")
	}
}
