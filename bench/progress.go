package bench

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// progress writes one line per step, and a status line every few seconds while a step waits,
// to stderr.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
	side  string // the scenario side running now, e.g. "burst/native"
}

func newProgress(w io.Writer) *progress { return &progress{w: w, start: time.Now()} }

func (p *progress) setSide(s string) {
	p.mu.Lock()
	p.side = s
	p.mu.Unlock()
}

// say writes one progress line.
func (p *progress) say(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	el := time.Since(p.start).Truncate(time.Second)
	fmt.Fprintf(p.w, "axbench %8s %-16s %s\n", el, p.side, fmt.Sprintf(format, args...))
}

// every writes what and status() every 2 s until the returned stop is called.
func (p *progress) every(what string, status func() string) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				p.say("%s: %s", what, status())
			}
		}
	}()
	return func() { close(done); <-finished }
}
