package integration

import (
	"context"
	"testing"
	"time"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/kvstore"
)

// The only bridge, a real process, is killed with SIGKILL for 5 s while two Ax-Every: 1s series
// wait for their next tick, then started again: under fire-once the ticks missed meanwhile fire as
// one occurrence (for the latest of them, counted as coalesced), under skip none of them fires
// (counted as missed); both series go on, one tick a second, and no tick fires twice.
func TestSeriesMisfireAfterKill9(t *testing.T) {
	t.Parallel()
	bin := buildBridge(t)
	e := newEnv(t)
	once := e.consumeSeries("ax.fire.once", nil)
	skip := e.consumeSeries("ax.fire.skip", nil)
	dir := t.TempDir()
	p := startProcess(t, bin, e.srv.ClientURL(), dir)
	e.schedule("once", "", bridge.HeaderTaskID, "mis-once", bridge.HeaderEvery, "1s", bridge.HeaderDelay, "500ms")
	e.schedule("skip", "", bridge.HeaderTaskID, "mis-skip", bridge.HeaderEvery, "1s", bridge.HeaderDelay, "500ms",
		bridge.HeaderMisfire, "skip")
	if !checkFor(10*time.Second, func() bool { return once.count() >= 2 && skip.count() >= 2 }) {
		t.Fatal("the series did not fire before the kill")
	}
	// Kill while both wait for a tick: their last occurrences settled, their next ticks not claimed.
	if !checkFor(10*time.Second, func() bool { return bothWait(e, once, skip) }) {
		t.Fatal("the series never both waited")
	}
	p.kill9(t)
	killed := time.Now()
	firedOnce, firedSkip := once.count(), skip.count()
	<-time.After(5 * time.Second) // the outage
	restarted := time.Now()
	p2 := startProcess(t, bin, e.srv.ClientURL(), dir)
	defer p2.stop(t)
	if !checkFor(15*time.Second, func() bool { return once.count() >= firedOnce+3 && skip.count() >= firedSkip+3 }) {
		t.Fatalf("the series did not go on: %d and %d fires after the restart", once.count()-firedOnce, skip.count()-firedSkip)
	}
	checkOutageFires(t, e, once, skip, killed, restarted)
}

// checkOutageFires checks the two series of an outage from down to up: no tick fired twice or
// early, one fire for the outage's ticks under fire-once and none under skip, and get's counts.
func checkOutageFires(t *testing.T, e *env, once, skip *seriesLog, down, up time.Time) {
	t.Helper()
	for name, l := range map[string]*seriesLog{"fire-once": once, "skip": skip} {
		fires := l.snapshot()
		seen := map[time.Time]bool{}
		for i, f := range fires {
			if seen[f.tick] {
				t.Errorf("%s: tick %s fired twice", name, f.tick)
			}
			seen[f.tick] = true
			if f.run != i+1 || f.at.Before(f.due) {
				t.Errorf("%s: fire %d is run %d, received %v before its due time", name, i, f.run, f.due.Sub(f.at))
			}
		}
		var during int // fires for ticks of the outage, after the kill
		for _, f := range fires {
			if f.tick.After(down) && f.tick.Before(up) {
				during++
			}
		}
		t.Logf("%s: %d fires, %d for ticks of the outage", name, len(fires), during)
		if want := map[string]int{"fire-once": 1, "skip": 0}[name]; during != want {
			t.Errorf("%s: %d fires for ticks of the 5 s outage, want %d", name, during, want)
		}
	}
	g := e.getSeries("mis-once")
	if g.Series.Coalesced < 3 || g.Series.Missed != 0 {
		t.Errorf("fire-once: coalesced %d missed %d, want at least 3 coalesced and none missed", g.Series.Coalesced, g.Series.Missed)
	}
	g = e.getSeries("mis-skip")
	if g.Series.Missed < 4 || g.Series.Coalesced != 0 {
		t.Errorf("skip: missed %d coalesced %d, want at least 4 missed", g.Series.Missed, g.Series.Coalesced)
	}
}

// bothWait reports whether both series wait for their next tick, their last occurrences settled,
// far enough (300 ms) from the next claim that an outage starting now cannot land in it.
func bothWait(e *env, once, skip *seriesLog) bool {
	waits := func(id string, l *seriesLog) bool {
		r, err := e.store.Get(context.Background(), id)
		return err == nil && r.Task.Status == kvstore.StatusWaiting && r.Task.Series.Run == l.count()+1 &&
			time.Until(time.UnixMilli(r.Task.DueAt)) > 300*time.Millisecond
	}
	return waits("mis-once", once) && waits("mis-skip", skip)
}

// The same across an outage of NATS itself: the only server is shut down for 5 s and started
// again on its store while the in-process bridge runs; under fire-once the ticks missed meanwhile
// fire as one occurrence, under skip none, and both series go on.
func TestSeriesMisfireAcrossNATSOutage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{})
	once := e.consumeSeries("ax.fire.once", nil)
	skip := e.consumeSeries("ax.fire.skip", nil)
	// A fire that goes out before the consumers' connection is back fails (no responders): a short
	// backoff sends it again at once, as the same occurrence.
	e.schedule("once", "", bridge.HeaderTaskID, "mis-once", bridge.HeaderEvery, "1s", bridge.HeaderDelay, "500ms",
		bridge.HeaderBackoff, "100ms")
	e.schedule("skip", "", bridge.HeaderTaskID, "mis-skip", bridge.HeaderEvery, "1s", bridge.HeaderDelay, "500ms",
		bridge.HeaderMisfire, "skip", bridge.HeaderBackoff, "100ms")
	if !checkFor(10*time.Second, func() bool { return once.count() >= 2 && skip.count() >= 2 }) {
		t.Fatal("the series did not fire before the outage")
	}
	if !checkFor(10*time.Second, func() bool { return bothWait(e, once, skip) }) {
		t.Fatal("the series never both waited")
	}
	e.srv.Shutdown()
	down := time.Now()
	firedOnce, firedSkip := once.count(), skip.count()
	<-time.After(5 * time.Second) // the outage
	up := time.Now()
	e.srv.Restart(t)
	if !checkFor(20*time.Second, func() bool { return once.count() >= firedOnce+3 && skip.count() >= firedSkip+3 }) {
		t.Fatalf("the series did not go on: %d and %d fires after NATS came back", once.count()-firedOnce, skip.count()-firedSkip)
	}
	checkOutageFires(t, e, once, skip, down, up)
}
