package membership

import "time"

// Clock is the member's time source: readings with a monotonic component, and timers.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is a timer of a Clock, with time.Timer's semantics.
type Timer interface {
	C() <-chan time.Time
	Reset(d time.Duration) bool
	Stop() bool
}

type runtimeClock struct{}

func (runtimeClock) Now() time.Time { return time.Now() }

func (runtimeClock) NewTimer(d time.Duration) Timer { return runtimeTimer{time.NewTimer(d)} }

type runtimeTimer struct{ t *time.Timer }

func (t runtimeTimer) C() <-chan time.Time        { return t.t.C }
func (t runtimeTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }
func (t runtimeTimer) Stop() bool                 { return t.t.Stop() }

// stopped returns a timer of c that is not running.
func stopped(c Clock) Timer {
	t := c.NewTimer(time.Hour)
	t.Stop()
	return t
}
