package kvstore

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/axbridge/axbridge/kvstore/record"
	"github.com/axbridge/axbridge/series"
)

// A series (subjects.md, "Recurring tasks") is one record whose occurrences take turns: the
// record is WAITING for its current tick, RUNNING while that occurrence's attempts run (each with
// its own attempts, backoff and lease, exactly as a one-shot task), and when the occurrence
// settles (SUCCESS or DEAD) it is WAITING again for the next tick, with Attempt 0 and Run one more.
// The tick after the current one is in the record before the current one fires (Series.Next), so
// a bridge that dies at any point leaves a record that says which tick comes next. Missed ticks
// are decided when an occurrence is claimed (Misfire), overlapping ones when it settles (advance).

// maxTicksCounted bounds the ticks one transition counts one by one (a cron series, whose ticks
// have no fixed interval): beyond it the counts are lower bounds.
const maxTicksCounted = 1 << 20

// ticker tells the ticks of one series: a fixed grid for an every-series, the cron spec's times
// otherwise, none after Until.
type ticker struct {
	sch   series.Schedule
	every int64 // ms; 0 for cron
	until int64
}

func tickerOf(s *Series) (ticker, error) {
	sch, err := series.Parse(series.Spec{Every: s.Every, Cron: s.Cron, Zone: s.Zone})
	if err != nil {
		return ticker{}, err
	}
	k := ticker{sch: sch, until: s.Until}
	if s.Cron == "" {
		k.every = s.Every.Milliseconds()
	}
	return k, nil
}

func (k ticker) bound(tk int64) int64 {
	if tk == 0 || (k.until != 0 && tk > k.until) {
		return 0
	}
	return tk
}

// next is the tick after tk (a tick of the series), 0 when there is none.
func (k ticker) next(tk int64) int64 { return k.bound(k.sch.Next(tk)) }

// atOrAfter is the first tick from tk (a tick) on that is not before at, 0 when there is none.
func (k ticker) atOrAfter(tk, at int64) int64 {
	switch {
	case tk >= at:
		return k.bound(tk)
	case k.every > 0:
		return k.bound(tk + (at-tk+k.every-1)/k.every*k.every)
	}
	return k.bound(k.sch.Next(at - 1))
}

// span counts the ticks from tk (a tick) up to and including upTo, and returns the last of them
// (0 when there is none).
func (k ticker) span(tk, upTo int64) (n, last int64) {
	if k.bound(tk) == 0 || tk > upTo {
		return 0, 0
	}
	if k.until != 0 {
		upTo = min(upTo, k.until)
	}
	if k.every > 0 {
		n = (upTo-tk)/k.every + 1
		return n, tk + (n-1)*k.every
	}
	for ; tk != 0 && tk <= upTo && n < maxTicksCounted; tk = k.next(tk) {
		n, last = n+1, tk
	}
	return n, last
}

// jitter is the occurrence's offset from its tick: the same for every bridge and every read of the
// record (a hash of the task id and the run), in [0, s.Jitter).
func jitter(id string, run int, d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	h.Write([]byte(strconv.Itoa(run)))
	return int64(h.Sum64() % uint64(d.Milliseconds()))
}

// nextRun makes t WAITING for the occurrence of tick tk, the run after s.Run, or ends the series
// with outcome (the status of the occurrence that just settled) when tk is 0 or the runs are used up.
func nextRun(t Task, s Series, k ticker, tk, now int64, outcome Status) Task {
	if tk == 0 || (s.MaxRuns > 0 && s.Run >= s.MaxRuns) {
		return finish(t, s, now, outcome)
	}
	s.Run++
	t = moveTo(t, s, k, tk)
	t.Attempt = 0
	t.FinishedAt = 0
	return t
}

// moveTo makes t WAITING for the occurrence of tick tk, with the run s says.
func moveTo(t Task, s Series, k ticker, tk int64) Task {
	s.Tick = tk
	s.Next = k.next(tk)
	if s.MaxRuns > 0 && s.Run >= s.MaxRuns {
		s.Next = 0
	}
	if s.CatchUpTo < tk {
		s.CatchUpTo = 0
	}
	t.Series = &s
	t.Status = StatusWaiting
	t.DueAt = tk + jitter(t.ID, s.Run, s.Jitter)
	return t
}

func finish(t Task, s Series, now int64, status Status) Task {
	t.Series = &s
	t.Status = status
	t.FinishedAt = now
	return t
}

// settle ends the current occurrence of a RUNNING task whose lease is already cleared (endLease)
// with outcome, SUCCESS or DEAD: a one-shot task ends there; a series goes on to its next tick
// (advance).
func settle(t Task, now int64, outcome Status) Task {
	if t.Series == nil {
		t.Status = outcome
		t.FinishedAt = now
		return t
	}
	return advance(t, now, outcome)
}

// advance moves a series whose occurrence just settled with outcome to its next occurrence. The
// ticks that came while that occurrence ran overlap it: under overlap "skip" none of them fires
// (they are counted as skipped) and the next occurrence is the first tick after now; under
// "buffer-one" the latest of them fires now. Ticks up to CatchUpTo (fire-all catching up after an
// outage) do not overlap: each fires in its turn.
func advance(t Task, now int64, outcome Status) Task {
	s := *t.Series
	if outcome == StatusDead {
		s.Dead++
		s.DeadRun, s.DeadAttempt = s.Run, t.Attempt
	}
	if s.Ending {
		return finish(t, s, now, StatusCancelled)
	}
	k, err := tickerOf(&s)
	if err != nil || s.Next == 0 {
		if err != nil {
			t.LastError = "series: " + err.Error()
		}
		return finish(t, s, now, outcome)
	}
	tk := s.Next
	if tk > s.CatchUpTo {
		if n, last := k.span(tk, now); n > 0 {
			if s.Overlap == record.OverlapBufferOne {
				s.Skipped += n - 1
				tk = last
			} else {
				s.Skipped += n
				tk = k.atOrAfter(last, now+1)
			}
		}
	}
	return nextRun(t, s, k, tk, now, outcome)
}

// Misfire applies a series' misfire policy when its occurrence is about to be claimed at now: it
// returns the record to claim and true, or a WAITING record for a later tick to write instead and
// false. An occurrence is on time when no later tick has come yet and it is late by no more than
// the catch-up window (under "skip", than the grace: the interval, at most a minute); otherwise
// its tick and every tick since up to now were missed: "fire-once" fires the latest of those
// within the catch-up window (the others within it coalesce into it), "fire-all" fires each of
// those within the window in order, "skip" fires none. Ticks older than the window are missed.
// A one-shot task, a retry of an occurrence (Attempt > 0) and fire-all's catching up are claimed
// as they are.
func Misfire(t Task, now int64) (Task, bool) {
	s := t.Series
	if s == nil || t.Status != StatusWaiting || t.Attempt > 0 || s.Tick > now || s.Tick <= s.CatchUpTo {
		return t, true
	}
	piled := s.Next != 0 && s.Next <= now
	if !piled && now-s.Tick <= lateAllowed(s) {
		return t, true
	}
	k, err := tickerOf(s)
	if err != nil {
		return t, true // the settle ends the series with the error
	}
	c := *s
	n, last := k.span(c.Tick, now)
	first := k.atOrAfter(c.Tick, now-c.Catchup.Milliseconds()) // the oldest tick within the window
	within := int64(0)
	if first != 0 && first <= last {
		within, _ = k.span(first, last)
	}
	c.Missed += n - within
	switch {
	case within > 0 && c.Misfire == record.MisfireFireOnce:
		c.Coalesced += within - 1
		return moveTo(t, c, k, last), true
	case within > 0 && c.Misfire == record.MisfireFireAll:
		c.CatchUpTo = last
		return moveTo(t, c, k, first), true
	case c.Misfire == record.MisfireSkip:
		c.Missed += within
	}
	t.UpdatedAt = now
	c.DeadRun, c.DeadAttempt = 0, 0 // this write is no death (Died)
	if tk := k.atOrAfter(last, now+1); tk != 0 {
		return moveTo(t, c, k, tk), false
	}
	return finish(t, c, now, StatusSuccess), false // no tick is left
}

// lateAllowed is how late an occurrence may be claimed and still count as on time (no later tick
// having come yet): the catch-up window, or under "skip" the grace.
func lateAllowed(s *Series) int64 {
	if s.Misfire != record.MisfireSkip {
		return s.Catchup.Milliseconds()
	}
	grace := int64(time.Minute / time.Millisecond)
	if s.Next != 0 {
		grace = min(grace, s.Next-s.Tick)
	}
	return grace
}

// Died reports whether t is the record of a transition that ended an attempt DEAD: a one-shot
// task's (or a series' last occurrence's) DEAD record, or the WAITING record a series went on to
// after an occurrence went DEAD (its dead event is due then: Series.DeadRun, DeadAttempt).
func Died(t *Task) bool {
	if t.Status == StatusDead {
		return true
	}
	s := t.Series
	return s != nil && t.Status == StatusWaiting && t.Attempt == 0 && s.DeadRun != 0 && s.DeadRun == s.Run-1
}

// StartSeries makes t, a new WAITING task whose Series holds its spec, its policies and its first
// tick (Series.Tick), wait for that tick: run 1, the tick after it, and DueAt the tick plus its
// jitter. It refuses a spec that does not parse.
func StartSeries(t Task) (Task, error) {
	if t.Series == nil {
		return t, fmt.Errorf("%w: start series of task %q: not a series", ErrTransition, t.ID)
	}
	k, err := tickerOf(t.Series)
	if err != nil {
		return t, fmt.Errorf("%w: start series of task %q: %w", ErrTransition, t.ID, err)
	}
	s := *t.Series
	s.Run = 1
	return moveTo(t, s, k, s.Tick), nil
}
