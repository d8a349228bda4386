package bridge

import (
	"slices"
	"sync"
	"time"

	"github.com/axbridge/axbridge/kvstore"
)

// Claim ahead. A WAITING task is claimed up to a window before its due time (Config.ClaimAhead
// bounds it; the recent claim latency sets it), so the claim's write lands before the task is
// due. The write's completion hands the RUNNING record back to the loop, which indexes it as a
// jobPublish step at its due time (heapPublish) and publishes it from there, with no store call
// in between. The fire still goes out only once the wall clock is at the due time, only while
// this replica's heartbeats are confirmed (alive) and within the attempt's lease, which counts
// from the due time (kvstore.Claim); a newer revision of the record seen on the watch drops the
// held fire. As with a claim fired from its completion, a held claim is fired even if its
// partition moved to another live replica meanwhile: it won its CAS, and the new owner waits for
// its lease. A replica fenced at the due time fires none of the claims it holds (the loop takes
// no step while it is); once its heartbeats are confirmed again it fires a held claim if the
// attempt's lease still runs, else gives the attempt back uncounted (publishFire). (A claim whose
// completion lands after the due time is published from the completion, as without claim ahead.)
// Likewise while the connection to NATS is down: a held fire is not put in the reconnect buffer,
// from which it could reach the consumer after the next attempt.

const (
	defaultClaimAhead = 100 * time.Millisecond
	maxClaimAhead     = time.Second
	// claimAheadFactor times the p99 of the recent claim latencies, plus a millisecond, is the
	// claim-ahead window (within Config.ClaimAhead).
	claimAheadFactor = 3
	// claimSamples is how many recent claim latencies the window is computed from.
	claimSamples = 256
	// aheadRefresh is how often the loop recomputes its window.
	aheadRefresh = 100 * time.Millisecond
	// drainSlack is how long past the claim-ahead bound a stopping loop waits for the claims it
	// took ahead.
	drainSlack = 50 * time.Millisecond
)

// claimTimes keeps the latencies of the recent successful claims, from the loop taking the task
// to the write's completion. Claim completions add (any goroutine); the loop reads the window.
type claimTimes struct {
	mu   sync.Mutex
	ring [claimSamples]time.Duration
	n    int // samples added in all
}

func (c *claimTimes) add(d time.Duration) {
	c.mu.Lock()
	c.ring[c.n%claimSamples] = d
	c.n++
	c.mu.Unlock()
}

// window is the claim-ahead window for the bound limit, rounded up to whole milliseconds: limit
// itself until a claim has been measured, 0 when limit is not positive.
func (c *claimTimes) window(limit time.Duration) time.Duration {
	if limit <= 0 {
		return 0
	}
	c.mu.Lock()
	s := slices.Clone(c.ring[:min(c.n, claimSamples)])
	c.mu.Unlock()
	if len(s) == 0 {
		return limit.Round(time.Millisecond)
	}
	slices.Sort(s)
	p99 := s[len(s)*99/100]
	w := min(claimAheadFactor*p99+time.Millisecond, limit)
	return time.Duration(addMs(0, w)) * time.Millisecond
}

// refreshAhead recomputes the core's claim-ahead window, at most every aheadRefresh.
func (l *loopState) refreshAhead() {
	if !l.aheadAt.IsZero() && l.now.Mono.Sub(l.aheadAt) < aheadRefresh {
		return
	}
	l.aheadAt = l.now.Mono
	ahead := l.b.fired.times.window(l.b.cfg.ClaimAhead)
	l.c.SetAhead(ahead)
	l.b.m.loop.claimAhead.Set(ahead.Seconds())
}

// nowMsUp is the wall clock in UTC Unix ms, rounded up. An ack's transition takes it as its time,
// so that a retry's due time (now + backoff after a nak) is never earlier than the ack's instant
// plus the backoff: a held fire goes out in the first instant of its due millisecond.
func (b *Bridge) nowMsUp() int64 { return addMs(0, time.Duration(b.cfg.Now().UnixNano())) }

// fireClaimed publishes a claim that landed, now if the task is due, or else hands it to the loop,
// which publishes it at its due time.
func (b *Bridge) fireClaimed(e kvstore.Entry) {
	if b.cfg.Now().UnixMilli() >= e.Task.DueAt {
		b.publishFire(e)
		return
	}
	b.report(result{ID: e.Task.ID, Rev: e.Revision, Kind: jobPublish, Held: &e})
}

// drainHeld runs when the loop is told to stop. It goes on publishing the fires it holds as they
// come due, and takes the claims that land meanwhile, until every task it took ahead is due (at
// most the claim-ahead bound and drainSlack away): a stop then costs none of them an attempt.
// Watch events are no longer read. Whatever it still holds at the end is not published, and its
// lease ends as after a crash.
func (l *loopState) drainHeld() {
	l.tick()
	if l.c.Held() == 0 && l.c.AheadUntil() <= l.now.Ms {
		return
	}
	end := l.now.Mono.Add(l.b.cfg.ClaimAhead + drainSlack)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for (l.c.Held() > 0 || l.c.AheadUntil() > l.now.Ms) && l.now.Mono.Before(end) {
		l.publishDue()
		d := end.Sub(l.now.Mono)
		if l.c.AheadUntil() > l.now.Ms {
			d = l.now.Until(l.c.AheadUntil(), d)
		}
		if due, ok := l.c.NextPublish(); ok {
			d = l.now.Until(due, d)
		}
		timer.Reset(d)
		select {
		case r := <-l.b.results:
			if r.Held != nil {
				l.tick()
				l.c.Result(r)
			}
		case <-timer.C:
		}
		l.tick()
	}
	l.publishDue()
	if n := l.c.Held(); n > 0 {
		l.b.log.Info("stopped with claims held for their due time: their leases end as after a crash", "tasks", n)
	}
}

// publishDue publishes the held fires that are due.
func (l *loopState) publishDue() {
	l.c.PublishDue(l.b.alive(), l.b.nc.IsConnected())
	l.carryOut()
}
