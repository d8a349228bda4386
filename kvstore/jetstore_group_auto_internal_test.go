package kvstore

import (
	"testing"
	"time"
)

// server is a scripted server for the policy: for each mode, how often writes sent that way
// complete, how many at a time, and whether writes wait behind them.
type server [2]struct {
	every   time.Duration
	writes  int
	backlog bool
}

// drive feeds p the completions srv gives for d from *now, each in the mode p chose last, and
// returns the modes p was in, with how long it spent in each.
func drive(p *autoPolicy, now *time.Time, d time.Duration, srv server) (spent [2]time.Duration) {
	end := now.Add(d)
	for now.Before(end) {
		m := p.mode
		c := srv[m]
		if c.every <= 0 {
			panic("drive: the server has no completions for " + m.String())
		}
		*now = now.Add(c.every)
		spent[m] += c.every
		p.observe(*now, completion{mode: m, writes: c.writes, backlog: c.backlog})
	}
	return spent
}

// untilProbe feeds p fsync-bound singles, one a millisecond, until it starts a probe of batches.
func untilProbe(t *testing.T, p *autoPolicy, now *time.Time) {
	t.Helper()
	for range 1000 {
		*now = now.Add(time.Millisecond)
		if p.observe(*now, completion{mode: sendSingles, writes: 1, backlog: true}) == sendBatches {
			if !p.probing {
				t.Fatal("batches without a probe")
			}
			return
		}
	}
	t.Fatal("no probe of batches in a second of fsync-bound singles")
}

var t0 = time.Unix(1_000_000, 0)

// fsyncBound is one node with sync_interval: always: singles back up at 1,000 writes/s, batches
// of 1000 complete every 50ms (20,000 writes/s).
var fsyncBound = server{
	sendSingles: {every: time.Millisecond, writes: 1, backlog: true},
	sendBatches: {every: 50 * time.Millisecond, writes: 1000, backlog: true},
}

func TestAutoPolicyShallowSinglesNeverProbe(t *testing.T) {
	p, now := newAutoPolicy(), t0
	srv := server{sendSingles: {every: 10 * time.Millisecond, writes: 1}}
	spent := drive(p, &now, time.Minute, srv)
	if p.mode != sendSingles || p.probes != 0 || spent[sendBatches] != 0 {
		t.Fatalf("mode %v, %d probes, %v batching; want singles all along", p.mode, p.probes, spent[sendBatches])
	}
}

func TestAutoPolicyBatchesWhenSinglesAreFsyncBound(t *testing.T) {
	p, now := newAutoPolicy(), t0
	drive(p, &now, 500*time.Millisecond, fsyncBound)
	if p.mode != sendBatches || p.probing || p.switches != 1 {
		t.Fatalf("after 0.5s: mode %v, probing %v, %d switches; want batches kept after one probe", p.mode, p.probing, p.switches)
	}
	// Batches stay, with probes of singles that lose, ever less often.
	spent := drive(p, &now, time.Minute, fsyncBound)
	if p.mode != sendBatches {
		t.Fatalf("after a minute: %v", p.mode)
	}
	// Probes of singles after 5s, 10s, 20s (the interval doubles): 3 in the minute, each about
	// two windows.
	if p.probes != 1+3 || p.switches != 1 {
		t.Errorf("%d probes, %d switches; want 4 probes, 1 switch", p.probes, p.switches)
	}
	if spent[sendSingles] > time.Second {
		t.Errorf("%v of the minute in singles", spent[sendSingles])
	}
}

func TestAutoPolicySinglesWhenBatchesAreNotFarFaster(t *testing.T) {
	for name, srv := range map[string]server{
		// Default sync: singles at 10,000/s, batches slower (the server fsyncs each).
		"slower": {sendSingles: {every: 100 * time.Microsecond, writes: 1, backlog: true},
			sendBatches: {every: 125 * time.Millisecond, writes: 1000, backlog: true}},
		// A cluster: batches 1.5x faster, short of autoGain.
		"a little faster": {sendSingles: {every: 200 * time.Microsecond, writes: 1, backlog: true},
			sendBatches: {every: 133 * time.Millisecond, writes: 1000, backlog: true}},
	} {
		t.Run(name, func(t *testing.T) {
			p, now := newAutoPolicy(), t0
			spent := drive(p, &now, time.Minute, srv)
			if p.mode != sendSingles || p.switches != 0 {
				t.Fatalf("mode %v, %d switches; want singles", p.mode, p.switches)
			}
			// Probes at once, then after 5s, 10s, 20s: the interval doubles.
			if p.probes != 4 {
				t.Errorf("%d probes in a minute", p.probes)
			}
			if spent[sendBatches] > 2*time.Second {
				t.Errorf("%v of the minute in batches", spent[sendBatches])
			}
		})
	}
}

func TestAutoPolicyChoose(t *testing.T) {
	backed := func(rate float64) windowResult { return windowResult{valid: true, rate: rate} }
	kept := func(rate float64) windowResult { return windowResult{valid: true, rate: rate, keptUp: true} }
	for _, c := range []struct {
		name string
		s, b windowResult
		best float64 // an earlier single window's rate
		want sendMode
	}{
		{name: "singles kept up", s: kept(1000), b: backed(50000), want: sendSingles},
		{name: "batches 2x", s: backed(1000), b: backed(2000), want: sendBatches},
		{name: "batches 1.9x", s: backed(1000), b: backed(1900), want: sendSingles},
		{name: "batches kept up, faster", s: backed(1000), b: kept(1100), want: sendBatches},
		{name: "batches kept up, slower: the load dropped", s: backed(1000), b: kept(900), want: sendSingles},
		{name: "no batch window", s: backed(1000), want: sendSingles},
		{name: "batches 2x the latest singles, not 2x their best", s: backed(1000), b: backed(2500), best: 1500, want: sendSingles},
		{name: "batches kept up short of the best singles", s: backed(1000), b: kept(1400), best: 1500, want: sendSingles},
		{name: "batches 2x the best singles", s: backed(1000), b: backed(3000), best: 1500, want: sendBatches},
	} {
		p := newAutoPolicy()
		p.last = [2]windowResult{c.s, c.b}
		p.singleRates[0] = c.best
		if got := p.choose(); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// Writes still in flight from the mode before a switch do not count for the new one.
func TestAutoPolicyCountsWritesByTheirMode(t *testing.T) {
	p, now := newAutoPolicy(), t0
	untilProbe(t, p, &now)
	// 500 singles sent before the switch complete, slowly: no batch window opens.
	for range 500 {
		now = now.Add(time.Millisecond)
		p.observe(now, completion{mode: sendSingles, writes: 1, backlog: true})
	}
	if p.open || !p.probing || p.mode != sendBatches {
		t.Fatalf("after the old singles: window open %v, probing %v, mode %v", p.open, p.probing, p.mode)
	}
	drive(p, &now, 200*time.Millisecond, fsyncBound)
	if p.mode != sendBatches || p.probing || p.last[sendBatches].rate < 10000 {
		t.Fatalf("mode %v, probing %v, batch window %+v; want batches chosen at 20,000/s", p.mode, p.probing, p.last[sendBatches])
	}
}

// A probe whose window spans a pause in the writes is void; a pause while batching keeps batches.
func TestAutoPolicyPause(t *testing.T) {
	p, now := newAutoPolicy(), t0
	untilProbe(t, p, &now)
	now = now.Add(50 * time.Millisecond)
	p.observe(now, completion{mode: sendBatches, writes: 1000, backlog: true}) // the probe's window opens
	now = now.Add(5 * time.Second)
	p.observe(now, completion{mode: sendBatches, writes: 3, backlog: true}) // after a pause
	if p.mode != sendSingles || p.probing || p.last[sendBatches].valid {
		t.Fatalf("mode %v, probing %v, batch window %+v; want the probe void, singles", p.mode, p.probing, p.last[sendBatches])
	}
	drive(p, &now, time.Second, fsyncBound)
	if p.mode != sendBatches {
		t.Fatalf("mode %v after a second of fsync-bound singles; want batches", p.mode)
	}
	// A pause of a minute between bursts, then the next burst: still batches.
	probes := p.probes
	now = now.Add(time.Minute)
	p.observe(now, completion{mode: sendBatches, writes: 1000, backlog: true})
	if p.mode != sendBatches || p.probes != probes {
		t.Fatalf("after the pause: mode %v, %d probes (were %d); want batches, no probe", p.mode, p.probes, probes)
	}
}

// A single window that keeps up sets the probe interval back to its least.
func TestAutoPolicyIntervalResets(t *testing.T) {
	defaultSync := server{sendSingles: {every: 100 * time.Microsecond, writes: 1, backlog: true},
		sendBatches: {every: 125 * time.Millisecond, writes: 1000, backlog: true}}
	p, now := newAutoPolicy(), t0
	drive(p, &now, 20*time.Second, defaultSync)
	if p.interval <= 4*autoProbeMin {
		t.Fatalf("interval %v after 20s of losing probes", p.interval)
	}
	drive(p, &now, time.Second, server{sendSingles: {every: 10 * time.Millisecond, writes: 1}})
	if p.interval != autoProbeMin {
		t.Fatalf("interval %v after singles kept up; want %v", p.interval, autoProbeMin)
	}
}

// Singles whose rate swings with the machine's load: one window at 3,000/s among windows at
// 10,000/s, just as a probe is due, must not make batches at 8,000/s win.
func TestAutoPolicyNoisySingles(t *testing.T) {
	fast := server{sendSingles: {every: 100 * time.Microsecond, writes: 1, backlog: true},
		sendBatches: {every: 125 * time.Millisecond, writes: 1000, backlog: true}}
	slow := fast
	slow[sendSingles].every = 333 * time.Microsecond
	p, now := newAutoPolicy(), t0
	drive(p, &now, 500*time.Millisecond, fast) // a probe of batches lost
	if p.mode != sendSingles || p.probes != 1 {
		t.Fatalf("mode %v, %d probes; want singles after one probe", p.mode, p.probes)
	}
	// Fast singles until the next probe is nearly due and a window has just closed.
	for now.Before(p.next.Add(-150*time.Millisecond)) || p.open {
		drive(p, &now, 100*time.Microsecond, fast)
	}
	for p.probes == 1 { // slow singles until the next probe starts
		drive(p, &now, time.Millisecond, slow)
	}
	if p.last[sendSingles].rate > 3100 {
		t.Fatalf("the probe came after a single window at %.0f/s", p.last[sendSingles].rate)
	}
	drive(p, &now, 500*time.Millisecond, fast)
	if p.switches != 0 || p.mode != sendSingles {
		t.Fatalf("%d switches, mode %v; want singles kept", p.switches, p.mode)
	}
}

// A flurry that backs singles up for less than autoBackedUpWindows windows starts no probe.
func TestAutoPolicyFlurryStartsNoProbe(t *testing.T) {
	p, now := newAutoPolicy(), t0
	for range 10 {
		drive(p, &now, time.Duration(autoBackedUpWindows-1)*autoWindow, fsyncBound)
		drive(p, &now, time.Second, server{sendSingles: {every: 10 * time.Millisecond, writes: 1},
			sendBatches: {every: 10 * time.Millisecond, writes: 1}})
	}
	if p.probes != 0 || p.mode != sendSingles {
		t.Fatalf("%d probes, mode %v; want none, singles", p.probes, p.mode)
	}
}
