package kvstore

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/axbridge/axbridge/kvstore/record"
)

// The task state machine: pure functions from a record and the time to the next record. No I/O, no
// clock: now is UTC Unix milliseconds, passed in. Each function takes the task by value and returns
// the new record; it never modifies the Payload, Header or Backoff it shares with its input. A
// refusal leaves nothing changed and returns an error wrapping ErrTransition or ErrStaleAttempt
// that names the operation and the state. Every transition sets UpdatedAt = now.
//
// Fencing: a claim records a token, the revision of the WAITING record it replaces. A stream
// sequence is never reused, so no two claims of a key share one, in this life of the id or any
// other. Ack, Nak, Term and InProgress name the token of the claim they report on and are admitted
// only while the task is RUNNING under that very claim; every transition out of RUNNING clears it.
// A report from an earlier attempt, or from an earlier life of a requeued task, is therefore
// stale, whatever attempt number it carried.
//
//	WAITING --Claim--> RUNNING --Ack--> SUCCESS
//	   |                 |  \--Nak / LeaseExpired--> WAITING (retry at now+backoff), or DEAD when exhausted
//	   |                 \--Term--> DEAD --Requeue--> WAITING
//	   \--Cancel--> CANCELLED                (Reschedule: WAITING -> WAITING at a new due time)

// ErrStaleAttempt: an ack, nak, term or progress report names a claim that is not the task's
// current one (typically a late reply to an attempt whose lease expired and which has been retried
// since, or a reply from a life of the task before a requeue). Callers ignore it.
var ErrStaleAttempt = errors.New("kvstore: stale attempt")

// Defaults for a task's retry policy (DESIGN.md, "Defaults"); intake fills them in, the state
// machine uses whatever the record holds.
const (
	DefaultMaxRetry = 3                // retries after the first attempt: 4 attempts in all
	DefaultAckWait  = 30 * time.Second // lease of one attempt
)

// DefaultBackoff returns the default waits before retries 1, 2, 3 (the last repeats): 10s, 30s, 60s.
func DefaultBackoff() []time.Duration {
	return []time.Duration{10 * time.Second, 30 * time.Second, 60 * time.Second}
}

// MaxRetryDelay is the longest wait before a retry: a nak's delay (NakWithDelay of any size) and
// a backoff entry are clamped to it, so no delay from outside overflows a due time.
const MaxRetryDelay = 30 * 24 * time.Hour

// Reasons recorded in LastError when the caller gives none.
const (
	reasonNak     = "nak"
	reasonTerm    = "terminated by consumer"
	reasonExpired = "ack wait expired"
)

// Claim starts the next attempt: WAITING → RUNNING, Attempt+1, LeaseUntil = AckWait after the
// later of now and DueAt, Owner = owner, Claim = rev, the revision of the WAITING record t (the
// fencing token; it must not be 0). The caller decides when to claim: a claim written ahead of
// the due time (fired at DueAt) gets the whole ack wait from DueAt on, as a claim at DueAt would.
func Claim(t Task, now int64, owner string, rev uint64) (Task, error) {
	if t.Status != StatusWaiting {
		return t, refuse("claim", t)
	}
	if rev == 0 {
		return t, fmt.Errorf("%w: claim of task %q: no revision to take as the claim token", ErrTransition, t.ID)
	}
	t.Status = StatusRunning
	t.Claim = rev
	t.Attempt++
	t.LeaseUntil = addDuration(max(now, t.DueAt), t.AckWait)
	t.Owner = owner
	t.UpdatedAt = now
	return t, nil
}

// Ack ends the task in success: RUNNING under claim → SUCCESS, FinishedAt = now, lease, owner and
// claim cleared.
func Ack(t Task, claim uint64, now int64) (Task, error) {
	if err := checkClaim("ack", t, claim); err != nil {
		return t, err
	}
	return settle(endLease(t, now), now, StatusSuccess), nil
}

// Nak fails the attempt: RUNNING under claim → WAITING with DueAt = now + delay, or DEAD
// (FinishedAt = now) when the attempts are exhausted (Attempt >= MaxRetry+1). A negative delay
// means the task's own backoff: Backoff[attempt-1], the last entry repeating, 0 without a backoff
// list. A delay is rounded up to whole milliseconds (never early) and clamped to MaxRetryDelay.
// LastError = reason ("nak" when empty).
func Nak(t Task, claim uint64, now int64, delay time.Duration, reason string) (Task, error) {
	if err := checkClaim("nak", t, claim); err != nil {
		return t, err
	}
	return endAttempt(t, now, delay, cmp.Or(reason, reasonNak)), nil
}

// Term gives up at once: RUNNING under claim → DEAD, FinishedAt = now, LastError = reason
// ("terminated by consumer" when empty).
func Term(t Task, claim uint64, now int64, reason string) (Task, error) {
	if err := checkClaim("term", t, claim); err != nil {
		return t, err
	}
	t = endLease(t, now)
	t.LastError = cmp.Or(reason, reasonTerm)
	return settle(t, now, StatusDead), nil
}

// InProgress extends the lease of the attempt RUNNING under claim: LeaseUntil = now + AckWait.
// It never shortens the lease: after a clock stepped back, the lease keeps its later end.
func InProgress(t Task, claim uint64, now int64) (Task, error) {
	if err := checkClaim("in progress", t, claim); err != nil {
		return t, err
	}
	t.LeaseUntil = max(t.LeaseUntil, addDuration(now, t.AckWait))
	t.UpdatedAt = now
	return t, nil
}

// LeaseExpired fails a RUNNING attempt whose lease has ended (LeaseUntil <= now) as Nak would with
// the task's backoff and reason "ack wait expired". It refuses a lease that has not ended yet.
func LeaseExpired(t Task, now int64) (Task, error) {
	if t.Status != StatusRunning {
		return t, refuse("lease expiry", t)
	}
	if t.LeaseUntil > now {
		return t, fmt.Errorf("%w: lease expiry of task %q attempt %d: lease runs until %d, now is %d",
			ErrTransition, t.ID, t.Attempt, t.LeaseUntil, now)
	}
	return endAttempt(t, now, -1, reasonExpired), nil
}

// Unclaim gives back an attempt whose fire never went out: RUNNING under claim → WAITING at its
// due time, the attempt not counted (Attempt one less), lease, owner and claim cleared. The next
// claim is a later revision, so its token differs from the one given back.
func Unclaim(t Task, claim uint64, now int64) (Task, error) {
	if err := checkClaim("unclaim", t, claim); err != nil {
		return t, err
	}
	t = endLease(t, now)
	t.Status = StatusWaiting
	t.Attempt = max(0, t.Attempt-1)
	return t, nil
}

// Abandon ends a task whose next write the store refuses for good: WAITING or RUNNING → DEAD,
// FinishedAt = now, LastError = reason, lease, owner and claim cleared.
func Abandon(t Task, now int64, reason string) (Task, error) {
	if t.Status != StatusWaiting && t.Status != StatusRunning {
		return t, refuse("abandon", t)
	}
	t = endLease(t, now)
	t.Status = StatusDead
	t.FinishedAt = now
	t.LastError = reason
	return t, nil
}

// Cancel drops a task that has not started: WAITING → CANCELLED, FinishedAt = now. A series ends
// so too; one whose occurrence runs stays RUNNING, marked to end (CANCELLED) when that occurrence
// settles, so that its consumer's answer still counts.
func Cancel(t Task, now int64) (Task, error) {
	if t.Status == StatusRunning && t.Series != nil {
		s := *t.Series
		s.Ending = true
		t.Series = &s
		t.UpdatedAt = now
		return t, nil
	}
	if t.Status != StatusWaiting {
		return t, refuse("cancel", t)
	}
	t.Status = StatusCancelled
	t.FinishedAt = now
	t.UpdatedAt = now
	return t, nil
}

// Requeue gives a DEAD task a new life: WAITING at due with Attempt = 0 and FinishedAt = 0;
// LastError is kept for the record. Attempts restart at 1 (a requeue is an operator's decision,
// not a redelivery) and MaxRetry counts the attempts of the new life; the claim tokens of the new
// life are later revisions, so no report from the old life is admitted.
func Requeue(t Task, now, due int64) (Task, error) {
	if t.Status != StatusDead {
		return t, refuse("requeue", t)
	}
	t = endLease(t, now)
	t.Status = StatusWaiting
	t.DueAt = due
	t.Attempt = 0
	t.FinishedAt = 0
	return t, nil
}

// Reschedule moves a WAITING task to a new due time. For a series it moves the next occurrence:
// its tick becomes due, and the tick after it follows the spec from there (an every-series' grid
// moves with it).
func Reschedule(t Task, now, due int64) (Task, error) {
	if t.Status != StatusWaiting {
		return t, refuse("reschedule", t)
	}
	if t.Series != nil {
		k, err := tickerOf(t.Series)
		if err != nil {
			return t, fmt.Errorf("%w: reschedule of task %q: %w", ErrTransition, t.ID, err)
		}
		t = moveTo(t, *t.Series, k, due)
		t.DueAt = due
		t.UpdatedAt = now
		return t, nil
	}
	t.DueAt = due
	t.UpdatedAt = now
	return t, nil
}

// endAttempt ends the current attempt of a RUNNING task: WAITING after the delay (the backoff when
// negative), or DEAD when no attempt is left.
func endAttempt(t Task, now int64, delay time.Duration, reason string) Task {
	t = endLease(t, now)
	t.LastError = reason
	if t.Attempt >= t.MaxRetry+1 {
		return settle(t, now, StatusDead)
	}
	if delay < 0 {
		delay = backoff(t.Backoff, t.Attempt)
	}
	delay = min(delay, MaxRetryDelay)
	t.Status = StatusWaiting
	t.DueAt = addDuration(now, delay)
	return t
}

// backoff is the wait before retry n (after attempt n failed): Backoff[n-1], the last entry
// repeating; 0 without a list.
func backoff(list []time.Duration, n int) time.Duration {
	if len(list) == 0 {
		return 0
	}
	return list[min(max(n, 1), len(list))-1]
}

// endLease clears the lease, owner and claim token and stamps the update.
func endLease(t Task, now int64) Task {
	t.LeaseUntil = 0
	t.Owner = ""
	t.Claim = 0
	t.UpdatedAt = now
	return t
}

// checkClaim admits a report on the claim a RUNNING task carries. Any other report is stale: a
// token of an earlier attempt or life while the task runs, or any token once it no longer runs.
func checkClaim(op string, t Task, claim uint64) error {
	if t.Status == StatusRunning && claim != 0 && claim == t.Claim {
		return nil
	}
	if t.Status == StatusRunning {
		return fmt.Errorf("%w: %s of task %q claim %d: the task is %s under claim %d (attempt %d)",
			ErrStaleAttempt, op, t.ID, claim, t.Status, t.Claim, t.Attempt)
	}
	return fmt.Errorf("%w: %s of task %q claim %d: the task is %s",
		ErrStaleAttempt, op, t.ID, claim, t.Status)
}

func refuse(op string, t Task) error {
	return fmt.Errorf("%w: %s of task %q: the task is %s", ErrTransition, op, t.ID, t.Status)
}

// addDuration returns now plus d in milliseconds, rounding a partial millisecond up and saturating
// instead of overflowing.
func addDuration(now int64, d time.Duration) int64 { return record.AddMs(now, d) }
