package kvstore

import (
	"math"
	"strings"
)

// Bounds of what a task's later writes add to its record (MaxMessageLen).
const (
	// MaxOwnerLen is the longest owner a RUNNING record names: a replica id.
	MaxOwnerLen = 64
	// MaxReasonLen is the longest last_error a write records, in bytes before escaping.
	MaxReasonLen = 1 << 10
	// writeHeadersMax bounds a record message's headers other than HdrRecord (the CAS sequence,
	// Nats-TTL, an atomic batch's id, sequence and commit) with the header framing.
	writeHeadersMax = 512
)

// MaxMessageLen bounds the size (value plus headers, what the server's max_payload limits) of
// every message the store writes for t's task in any later state: RUNNING with a lease, an owner
// and a claim token, retried, finished, requeued, every number at its widest and a last_error of
// MaxReasonLen bytes that each escape six-fold, plus the copy of the metadata line in HdrRecord. A
// task under the server's limit by this measure can always be claimed, retried and finished. The
// error is EncodeTask's.
func MaxMessageLen(t *Task) (int, error) {
	if err := checkTask(t); err != nil {
		return 0, err
	}
	g := *t
	g.Payload = nil
	g.Status = StatusCancelled // the longest status
	g.DueAt, g.LeaseUntil, g.UpdatedAt, g.FinishedAt = math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64
	g.Attempt = math.MaxInt
	g.Claim = math.MaxUint64
	g.Owner = strings.Repeat("r", MaxOwnerLen)
	g.LastError = strings.Repeat("\x01", MaxReasonLen+len("…")) // \u0001 each
	if t.Series != nil {
		s := *t.Series
		s.Tick, s.Next, s.Until, s.CatchUpTo = math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64
		s.Run, s.Missed, s.Coalesced, s.Skipped, s.Dead = math.MaxInt, math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64
		s.DeadRun, s.DeadAttempt, s.Ending = math.MaxInt, math.MaxInt, true
		g.Series = &s
	}
	line := len(appendTask(make([]byte, 0, encodedSizeHint(&g)+6*MaxReasonLen), &g)) - 1
	hdr := len(HdrRecord) + len(": \r\n") + min(line, recordHeaderMax)
	return line + 1 + len(t.Payload) + hdr + writeHeadersMax, nil
}
