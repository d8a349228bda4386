// Package retry is the one backoff policy of the bridge and its store: waits that grow from
// First to Max, doubling, with an optional share drawn at random, bounded by a number of tries
// or by the caller's context. Every place that tries an operation again takes its pacing from a
// Policy, and the bridge's are listed together in policies.go, so that the longest a stuck write
// can take is read off one table.
package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy paces the tries of one operation. The zero Policy retries at once, without end.
type Policy struct {
	First  time.Duration // the wait after the first failed try
	Max    time.Duration // the longest wait (below First: First, a constant pace)
	Jitter float64       // the share of each wait drawn at random, in [0, 1]: 0.2 waits 80-100%
	Tries  int           // the most tries, the first included (0: until the context ends)
}

// Wait is the wait after n failed tries (n ≥ 1): First doubled n-1 times, at most Max, less a
// random share of up to Jitter.
func (p Policy) Wait(n int) time.Duration {
	return p.jitter(p.base(n), rand.Float64())
}

// WaitFor is Wait with the random share drawn from key instead (a deterministic caller, as the
// scheduling core, passes a hash of the task and the try).
func (p Policy) WaitFor(n int, key uint64) time.Duration {
	return p.jitter(p.base(n), float64(key>>11)/(1<<53))
}

func (p Policy) base(n int) time.Duration {
	d, top := p.First, max(p.Max, p.First)
	for i := 1; i < n && d < top; i++ {
		d *= 2
	}
	return min(d, top)
}

func (p Policy) jitter(d time.Duration, r float64) time.Duration {
	if p.Jitter <= 0 || d <= 0 {
		return d
	}
	return d - time.Duration(float64(d)*min(p.Jitter, 1)*r)
}

// More reports whether a try may follow n failed ones.
func (p Policy) More(n int) bool { return p.Tries == 0 || n < p.Tries }

// Sleep waits Wait(n) after n failed tries. It reports false, at once, when no try may follow
// (More), or when ctx ends first.
func (p Policy) Sleep(ctx context.Context, n int) bool {
	if !p.More(n) {
		return false
	}
	t := time.NewTimer(p.Wait(n))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Backoff counts the failed tries of one operation under its Policy.
type Backoff struct {
	Policy
	n int
}

// Next counts a failed try and waits before the next one; false if none may follow or ctx ended.
func (b *Backoff) Next(ctx context.Context) bool {
	b.n++
	return b.Sleep(ctx, b.n)
}

// Reset starts the count again, after a success.
func (b *Backoff) Reset() { b.n = 0 }

// Failed is the number of failed tries counted since the last Reset.
func (b *Backoff) Failed() int { return b.n }
