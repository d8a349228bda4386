package bridge

import (
	"time"

	"github.com/axbridge/axbridge/bridge/internal/sched"
	"github.com/axbridge/axbridge/kvstore/record"
)

// Time in the loop. Due times are UTC Unix milliseconds (the record's, the wire's) and the loop
// compares them with a fresh reading of the wall clock (Config.Now) on every turn: a task is due
// when the firing bridge's clock says so, never earlier. The runtime's monotonic clock only
// measures how long to sleep until the next due time, and how far the wall clock moved between two
// readings, so that a step of the wall clock (an NTP step, a VM resumed) is noticed within a
// second: nothing in the index is relative to an origin, so re-basing is only re-arming the timer.

// reading is one look at both clocks.
type reading = sched.Time

func (b *Bridge) read() reading {
	mono := time.Now()
	w := b.cfg.Now()
	return reading{Mono: mono, Wall: w.UnixNano(), Ms: w.UnixMilli()}
}

const (
	// idleCheck is the longest the loop sleeps: it reads the clocks at least this often.
	idleCheck = time.Second
	// stepThreshold is how far the wall clock may move against the monotonic one between two
	// readings before the loop calls it a step (slewing moves it by at most 0.5 ms a second).
	stepThreshold = 50 * time.Millisecond
)

// stepDetector compares the wall clock's progress with the monotonic clock's.
type stepDetector struct {
	base reading
}

// check returns the size of a wall-clock step since the last reading it kept (positive: the wall
// clock jumped ahead), and ok=false when there was none. It keeps a new base every second, so
// slow slewing never adds up to a step.
func (d *stepDetector) check(r reading) (step time.Duration, ok bool) {
	if d.base.Mono.IsZero() {
		d.base = r
		return 0, false
	}
	mono := r.Mono.Sub(d.base.Mono)
	step = time.Duration(r.Wall-d.base.Wall) - mono
	if step > stepThreshold || step < -stepThreshold {
		d.base = r
		return step, true
	}
	if mono >= idleCheck {
		d.base = r
	}
	return 0, false
}

// addMs returns ms + d in whole milliseconds (d rounded up), saturating at the ends of int64.
func addMs(ms int64, d time.Duration) int64 { return record.AddMs(ms, d) }

// subMs returns ms - d in whole milliseconds, saturating.
func subMs(ms int64, d time.Duration) int64 { return record.SubMs(ms, d) }
