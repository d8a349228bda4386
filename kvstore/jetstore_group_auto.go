package kvstore

import "time"

// Automatic grouping: the decision (jetstore_group.go says what the grouper does with it).
//
// autoPolicy is a pure function of what it is fed: no clock, no goroutine, no I/O. The grouper
// calls observe each time writes complete, with the time, how those writes were sent (one by
// one, or in a batch), how many there were, and whether writes were waiting in the grouper at
// that moment, held back by its limit of writes in flight (a backlog). observe answers how the
// grouper sends from then on.
//
// It measures in windows: a window opens at the first completion of writes sent the current way
// and closes at the first completion at least autoWindow later, with the rate (writes completed
// after its first completion, per second) and whether it kept up (at most half of its
// completions saw a backlog). Completions of writes sent the other way (still in flight from
// before a switch) are not counted, so a window measures only the way it is named after. Two
// completions more than autoIdle apart end a window without a result: it spanned a pause in the
// writes, and its rate would say nothing.
//
//   - Singles are the default and the preference. A single window that kept up (the pipeline is
//     shallow: the fsync, if any, is not the limit) keeps singles.
//   - autoBackedUpWindows single windows in a row that did not keep up start a probe, unless one
//     ran less than the probe interval ago: the grouper sends batches for one window.
//   - While batching, a probe of singles runs once the probe interval has passed since the last,
//     at the close of a window (so a pause between bursts keeps batches for the next burst).
//   - A probe ends with its window; then, from the latest window of each way: singles if the
//     single window kept up; else batches if their rate was at least autoGain times the singles'
//     (the best of the last autoSinglesKept single windows that backed up), or if the batch
//     window kept up at no less than that (batches did what singles could not); else singles (a batch window that kept up at a lower rate only says the writes
//     slowed down). A probe whose window spanned a pause is void: the mode goes back to what it
//     was.
//   - Batches must win by a wide margin; that and the probe interval, which doubles after every
//     probe (up to autoProbeMax) and falls back to autoProbeMin only when a single window keeps
//     up, are the hysteresis.
//
// What it sees: with sync_interval: always on one node every single write is an fsync, so
// singles back up at the disk's fsync rate and batches (two fsyncs for up to 1000 writes) are
// many times faster; without it, or on a replicated stream, batches are no faster (or slower)
// and singles stay. The client cannot read the server's sync setting; the rates show it.

// Settings of the policy.
const (
	autoWindow   = 100 * time.Millisecond // least length of a measurement window
	autoIdle     = time.Second            // completions further apart than this are a pause
	autoGain     = 2.0                    // batches must complete this many times the writes/s of singles
	autoProbeMin = 5 * time.Second        // probe interval after a single window kept up
	autoProbeMax = time.Minute            // the probe interval doubles up to this
	// Batches are measured against the best of this many recent single windows that backed up:
	// the single rate varies with what else the machine does, and one low reading must not make
	// batches look better than they are.
	autoSinglesKept = 3
	// A probe of batches starts only after this many single windows in a row backed up: a short
	// flurry of writes (a few thousand schedules at once) is not worth a probe, which under the
	// default sync costs the latency of a staged batch.
	autoBackedUpWindows = 3
)

// sendMode is how the grouper sends writes.
type sendMode uint8

const (
	sendSingles sendMode = iota // each on its own, pipelined
	sendBatches                 // in atomic batches
)

func (m sendMode) String() string {
	if m == sendBatches {
		return "batches"
	}
	return "singles"
}

// completion is what the grouper reports when writes complete.
type completion struct {
	mode    sendMode // the mode they were sent in (a batch of one is sent alone, in sendBatches)
	writes  int      // how many completed (a batch's writes complete together)
	backlog bool     // writes were waiting in the grouper, held back by its limit in flight
}

// windowResult is what a finished window measured.
type windowResult struct {
	valid  bool
	rate   float64 // writes completed per second
	keptUp bool    // at most half of the window's completions saw a backlog
}

type autoPolicy struct {
	mode     sendMode
	probing  bool          // the current window is a probe of mode
	next     time.Time     // no probe starts before this
	interval time.Duration // from the end of a probe to the next one's earliest start

	// The open window: since its first completion at start, writes completed after that one,
	// completions, and those that saw a backlog.
	open    bool
	start   time.Time
	prev    time.Time // the window's latest completion
	writes  int
	events  int
	backlog int

	last [2]windowResult // the latest finished window of each mode
	// The rates of the latest autoSinglesKept single windows that did not keep up: what singles
	// do at best is the highest.
	singleRates [autoSinglesKept]float64
	singleNext  int
	backedUp    int // single windows in a row that did not keep up

	probes, switches uint64 // probes started; changes of the mode kept after a probe
}

func newAutoPolicy() *autoPolicy { return &autoPolicy{interval: autoProbeMin} }

// observe takes a completion at now and returns how to send from now on.
func (p *autoPolicy) observe(now time.Time, c completion) sendMode {
	if c.mode != p.mode {
		return p.mode
	}
	if !p.open {
		p.open, p.start, p.prev, p.writes, p.events, p.backlog = true, now, now, 0, 1, 0
		if c.backlog {
			p.backlog = 1
		}
		return p.mode
	}
	if now.Sub(p.prev) > autoIdle { // a pause: the window has no rate
		p.open = false
		switch {
		case p.probing: // void: back to the mode it interrupted
			p.probing, p.mode, p.next = false, p.other(), now
		case p.mode == sendSingles:
			p.interval, p.backedUp = autoProbeMin, 0
		}
		return p.observe(now, c) // a window of the mode opens at this completion, if it counts
	}
	p.prev = now
	p.writes += c.writes
	p.events++
	if c.backlog {
		p.backlog++
	}
	d := now.Sub(p.start)
	if d < autoWindow {
		return p.mode
	}
	p.open = false
	r := windowResult{valid: true, rate: float64(p.writes) / d.Seconds(), keptUp: 2*p.backlog <= p.events}
	p.last[p.mode] = r
	switch {
	case p.mode == sendSingles && r.keptUp:
		p.backedUp = 0
	case p.mode == sendSingles:
		p.singleRates[p.singleNext] = r.rate
		p.singleNext = (p.singleNext + 1) % autoSinglesKept
		p.backedUp++
	}
	switch {
	case p.probing:
		p.probing = false
		before := p.other() // the mode the probe interrupted
		p.mode = p.choose()
		if p.mode != before {
			p.switches++
		}
		p.next = now.Add(p.interval)
		p.interval = min(2*p.interval, autoProbeMax)
	case p.mode == sendSingles && r.keptUp:
		p.interval = autoProbeMin
	case p.mode == sendSingles && p.backedUp >= autoBackedUpWindows && !now.Before(p.next):
		p.backedUp = 0
		p.probing, p.mode = true, sendBatches
		p.probes++
	case p.mode == sendBatches && !now.Before(p.next):
		p.probing, p.mode = true, sendSingles
		p.probes++
	}
	return p.mode
}

// choose picks the mode from the latest window of each.
func (p *autoPolicy) choose() sendMode {
	s, b := p.last[sendSingles], p.last[sendBatches]
	if !s.valid || s.keptUp || !b.valid {
		return sendSingles
	}
	best := s.rate
	for _, r := range p.singleRates {
		best = max(best, r)
	}
	switch {
	case b.rate >= autoGain*best, b.keptUp && b.rate >= best:
		return sendBatches
	}
	return sendSingles
}

func (p *autoPolicy) other() sendMode {
	if p.mode == sendSingles {
		return sendBatches
	}
	return sendSingles
}
