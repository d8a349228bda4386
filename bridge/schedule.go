package bridge

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/kvstore"
)

// Rejection codes (subjects.md, "Rejections").
const (
	CodeBadBizType        = "BAD_BIZ_TYPE"
	CodeBadTaskID         = "BAD_TASK_ID"
	CodeBadDelay          = "BAD_DELAY"
	CodeBadDeliverAt      = "BAD_DELIVER_AT"
	CodeDelayAndDeliverAt = "DELAY_AND_DELIVER_AT"
	CodeDueInPast         = "DUE_IN_PAST"
	CodeBeyondHorizon     = "BEYOND_HORIZON"
	CodeBadMaxRetry       = "BAD_MAX_RETRY"
	CodeBadAckWait        = "BAD_ACK_WAIT"
	CodeBadBackoff        = "BAD_BACKOFF"
	CodePayloadTooLarge   = "PAYLOAD_TOO_LARGE"
	CodeDuplicateConflict = "DUPLICATE_CONFLICT"
	CodeBadReplace        = "BAD_REPLACE"
	CodeReplaceRunning    = "REPLACE_RUNNING"
	CodeStoreRefused      = "STORE_REFUSED"
	CodeStoreUnavailable  = "STORE_UNAVAILABLE"
	CodeStaleReplay       = "STALE_REPLAY"
)

// Limits on per-task policy (subjects.md, "Scheduling").
const (
	maxMaxRetry     = 100
	minAckWait      = time.Second
	maxAckWait      = 12 * time.Hour
	maxBackoffLen   = 50
	maxBackoffEntry = 30 * 24 * time.Hour
)

// rejection is why a schedule message was refused.
type rejection struct {
	code   string
	reason string
}

func (r *rejection) Error() string { return r.code + ": " + r.reason }

func reject(code, format string, args ...any) *rejection {
	return &rejection{code: code, reason: fmt.Sprintf(format, args...)}
}

// scheduleMsg is one intake message, as the stream accepted it.
type scheduleMsg struct {
	subject  string
	header   nats.Header
	payload  []byte
	accepted time.Time // the stream's timestamp: Ax-Delay counts from here
	seq      uint64    // the stream sequence: generated task ids derive from it
}

// parseSchedule validates one schedule message and builds its WAITING task record.
// It reads no clock: "now" for a new task is when the stream accepted the message.
//
// recordLimit is the largest message the server takes (0: not checked); a task whose record's
// messages could be larger (checkRecord) is refused with PAYLOAD_TOO_LARGE, as is one over
// c.MaxPayload.
func (c *Config) parseSchedule(m scheduleMsg, recordLimit int) (kvstore.Task, *rejection) {
	biz, ok := c.subj.cutSchedule(m.subject)
	if !ok {
		return kvstore.Task{}, reject(CodeBadBizType,
			"subject %q: the bizType must be one token of 1-64 characters from [A-Za-z0-9_-] after %q", m.subject, c.subj.schedule)
	}
	id, rej := taskID(m)
	if rej != nil {
		return kvstore.Task{}, rej
	}
	due, rej := c.parseDue(m.header, m.accepted)
	if rej != nil {
		return kvstore.Task{}, rej
	}
	t := kvstore.Task{
		ID:       id,
		BizType:  biz,
		Payload:  m.payload,
		Status:   kvstore.StatusWaiting,
		DueAt:    due,
		MaxRetry: c.MaxAttempts - 1,
		AckWait:  c.AckWait,
		Backoff:  c.Backoff,
	}
	if rej := parsePolicy(m.header, &t); rej != nil {
		return kvstore.Task{}, rej
	}
	if v, ok := headerValue(m.header, HeaderReplace); ok && v != "true" && v != "false" {
		return kvstore.Task{}, reject(CodeBadReplace, "%s %q: want true or false", HeaderReplace, v)
	}
	_, hasDelay := m.header[HeaderDelay]
	_, hasAt := m.header[HeaderDeliverAt]
	if rej := parseSeries(m.header, &t, hasDelay || hasAt, m.accepted.UnixMilli(), c.biz.get(biz)); rej != nil {
		return kvstore.Task{}, rej
	}
	if size := keepHeaders(m, &t); size > c.MaxPayload {
		return kvstore.Task{}, reject(CodePayloadTooLarge, "payload and headers are %d bytes; the limit is %d", size, c.MaxPayload)
	}
	acceptedMs := m.accepted.UnixMilli()
	t.CreatedAt, t.UpdatedAt = acceptedMs, acceptedMs
	t.Fingerprint = fingerprint(biz, m.payload, m.header)
	if rej := checkRecord(&t, recordLimit); rej != nil {
		return kvstore.Task{}, rej
	}
	return t, nil
}

// taskID is the task id m gives, or one generated from where the stream put m.
func taskID(m scheduleMsg) (string, *rejection) {
	id := m.header.Get(HeaderTaskID)
	if _, given := m.header[HeaderTaskID]; !given {
		return generatedID(m.accepted, m.seq), nil
	}
	if err := kvstore.ValidateID(id); err != nil {
		return "", reject(CodeBadTaskID, "%s: %s", HeaderTaskID, strings.TrimPrefix(err.Error(), "kvstore: "))
	}
	return id, nil
}

// parsePolicy sets t's retry policy from the headers that override the defaults.
func parsePolicy(h nats.Header, t *kvstore.Task) *rejection {
	if v, given := headerValue(h, HeaderMaxRetry); given {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 || n > maxMaxRetry {
			return reject(CodeBadMaxRetry, "%s %q: want an integer from 0 to %d", HeaderMaxRetry, v, maxMaxRetry)
		}
		t.MaxRetry = n
	}
	if v, given := headerValue(h, HeaderAckWait); given {
		d, err := parseDuration(v)
		if err == nil {
			err = checkAckWait(d)
		}
		if err != nil {
			return reject(CodeBadAckWait, "%s %q: %v", HeaderAckWait, v, err)
		}
		t.AckWait = d
	}
	if v, given := headerValue(h, HeaderBackoff); given {
		b, err := ParseBackoff(v)
		if err != nil {
			return reject(CodeBadBackoff, "%s %q: %v", HeaderBackoff, v, err)
		}
		t.Backoff = b
	}
	return nil
}

// keepHeaders copies m's headers other than the control ones into t, and returns the size of the
// payload and those headers.
func keepHeaders(m scheduleMsg, t *kvstore.Task) int {
	size := len(m.payload)
	for k, vs := range m.header {
		if isControlHeader(k) {
			continue
		}
		if t.Header == nil {
			t.Header = make(map[string][]string, len(m.header))
		}
		t.Header[k] = vs
		for _, v := range vs {
			size += len(k) + len(v)
		}
	}
	return size
}

// checkRecord refuses t if a message of its record, in the largest state a later write gives it,
// would be over recordLimit bytes (0: not checked): a stored task must stay writable until it ends.
func checkRecord(t *kvstore.Task, recordLimit int) *rejection {
	if recordLimit <= 0 {
		return nil
	}
	// Headers count in the record's lossless form (base64 when not UTF-8), and again in the copy
	// of its metadata line that the message carries as a header.
	n, err := kvstore.MaxMessageLen(t)
	if err != nil {
		return reject(CodePayloadTooLarge, "the task cannot be encoded: %v", err)
	}
	if n > recordLimit {
		return reject(CodePayloadTooLarge,
			"the stored record's messages could reach %d bytes (payload %d, headers as stored and once more as the record header, metadata at its largest); the server takes at most %d",
			n, len(t.Payload), recordLimit)
	}
	return nil
}

// fingerprint identifies what the client sent: the bizType, the payload and every header as
// received except the task id and the due time (Ax-Task-Id, Ax-Delay, Ax-Deliver-At). Keys are
// sorted, values keep their order, and every part is length-prefixed, so two different messages
// never encode alike. Policy headers (Ax-Max-Retry, Ax-Ack-Wait, Ax-Backoff) count as sent, and the
// defaults the bridge fills in do not: a redelivery stays a duplicate after an operator changes
// --backoff, or when replicas run with different defaults.
func fingerprint(biz string, payload []byte, h nats.Header) string {
	keys := make([]string, 0, len(h))
	for k := range h {
		if k != HeaderTaskID && k != HeaderDelay && k != HeaderDeliverAt {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	d := sha256.New()
	var n [binary.MaxVarintLen64]byte
	field := func(b []byte) {
		d.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
		d.Write(b)
	}
	field([]byte(biz))
	field(payload)
	d.Write(n[:binary.PutUvarint(n[:], uint64(len(keys)))])
	for _, k := range keys {
		field([]byte(k))
		vs := h[k]
		d.Write(n[:binary.PutUvarint(n[:], uint64(len(vs)))])
		for _, v := range vs {
			field([]byte(v))
		}
	}
	return "sha256:" + hex.EncodeToString(d.Sum(nil))
}

// parseDue returns the due time in UTC Unix ms, rounded up so a task never fires early.
func (c *Config) parseDue(h nats.Header, accepted time.Time) (int64, *rejection) {
	delay, hasDelay := headerValue(h, HeaderDelay)
	at, hasAt := headerValue(h, HeaderDeliverAt)
	var dueNs int64
	switch {
	case hasDelay && hasAt:
		return 0, reject(CodeDelayAndDeliverAt, "give either %s or %s, not both", HeaderDelay, HeaderDeliverAt)
	case hasDelay:
		d, err := parseDuration(delay)
		if err != nil {
			return 0, reject(CodeBadDelay, "%s %q: %v", HeaderDelay, delay, err)
		}
		if d < 0 {
			return 0, reject(CodeBadDelay, "%s %q: negative", HeaderDelay, delay)
		}
		if d > c.MaxHorizon {
			return 0, reject(CodeBeyondHorizon, "%s %q is beyond the maximum horizon of %v", HeaderDelay, delay, c.MaxHorizon)
		}
		dueNs = accepted.UnixNano() + int64(d)
	case hasAt:
		t, err := parseTime(at)
		if err != nil {
			return 0, reject(CodeBadDeliverAt, "%s %q: %v", HeaderDeliverAt, at, err)
		}
		if t.Before(accepted.Add(-c.PastTolerance)) {
			return 0, reject(CodeDueInPast, "%s %q is more than %v in the past", HeaderDeliverAt, at, c.PastTolerance)
		}
		if t.After(accepted.Add(c.MaxHorizon)) {
			return 0, reject(CodeBeyondHorizon, "%s %q is beyond the maximum horizon of %v", HeaderDeliverAt, at, c.MaxHorizon)
		}
		dueNs = t.UnixNano()
	default:
		dueNs = accepted.UnixNano()
	}
	ms := dueNs / 1e6
	if dueNs%1e6 > 0 {
		ms++
	}
	return ms, nil
}

// headerValue returns the first value of a header the caller set, even an empty one.
func headerValue(h nats.Header, k string) (string, bool) {
	vs, ok := h[k]
	if !ok || len(vs) == 0 {
		return "", ok
	}
	return vs[0], true
}

// parseDuration accepts a Go duration ("1500ms", "30m") or an integer number of milliseconds.
// Records keep whole milliseconds, so a finer duration is rounded up (never early, and a
// repeated schedule compares equal to the stored task).
func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty")
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n > math.MaxInt64/int64(time.Millisecond) || n < math.MinInt64/int64(time.Millisecond) {
			return 0, fmt.Errorf("%d ms overflows", n)
		}
		return time.Duration(n) * time.Millisecond, nil
	} else if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
		return 0, fmt.Errorf("overflows")
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("want a duration like 1500ms or 30m, or whole milliseconds")
	}
	if r := d % time.Millisecond; r > 0 && d < math.MaxInt64-time.Millisecond {
		d += time.Millisecond - r
	}
	return d, nil
}

// parseTime accepts RFC 3339 (fractional seconds allowed) or integer Unix milliseconds.
func parseTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 || n > math.MaxInt64/int64(time.Millisecond) {
			return time.Time{}, fmt.Errorf("unix milliseconds out of range")
		}
		return time.UnixMilli(n), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("want RFC 3339 like 2026-12-01T08:00:00Z, or Unix milliseconds")
	}
	return t, nil
}

func checkAckWait(d time.Duration) error {
	if d < minAckWait || d > maxAckWait {
		return fmt.Errorf("ack wait %v: want %v to %v", d, minAckWait, maxAckWait)
	}
	return nil
}

func checkBackoff(b []time.Duration) error {
	if len(b) == 0 || len(b) > maxBackoffLen {
		return fmt.Errorf("backoff: want 1 to %d entries, got %d", maxBackoffLen, len(b))
	}
	for i, d := range b {
		if d < 0 || d > maxBackoffEntry {
			return fmt.Errorf("backoff entry %d (%v): want 0 to %v", i+1, d, maxBackoffEntry)
		}
	}
	return nil
}

// ParseBackoff reads a backoff list as the Ax-Backoff header takes it: comma-separated Go
// durations or integer milliseconds, 1-50 entries, each 0-30 days.
func ParseBackoff(s string) ([]time.Duration, error) {
	parts := strings.Split(s, ",")
	if len(parts) > maxBackoffLen {
		return nil, fmt.Errorf("%d entries; at most %d", len(parts), maxBackoffLen)
	}
	b := make([]time.Duration, 0, len(parts))
	for i, p := range parts {
		d, err := parseDuration(p)
		if err != nil {
			return nil, fmt.Errorf("entry %d: %v", i+1, err)
		}
		b = append(b, d)
	}
	if err := checkBackoff(b); err != nil {
		return nil, err
	}
	return b, nil
}

// generatedID is the task id of a message without Ax-Task-Id: a UUIDv7 whose time is the stream's
// timestamp and whose "random" bits are the stream sequence, so a redelivered message (after a
// crash between storing the task and acking the message) maps to the same task, not a second one.
func generatedID(accepted time.Time, seq uint64) string {
	var u uuid.UUID
	ms := uint64(accepted.UnixMilli())
	for i := 0; i < 6; i++ {
		u[i] = byte(ms >> (40 - 8*i))
	}
	u[6] = 0x70 // version 7, rand_a = 0
	u[8] = 0x80 | byte(seq>>56)&0x3f
	for i := 9; i < 16; i++ {
		u[i] = byte(seq >> (8 * (15 - i)))
	}
	return u.String()
}

// sameContent reports whether a repeated schedule carries the same task as the stored one
// (subjects.md, "Task ids and duplicates"): the due time is not compared. Records that carry the
// schedule message's fingerprint compare on it, that is on what the client sent; older records
// compare on the stored fields, defaults included.
func sameContent(a, b *kvstore.Task) bool {
	if a.Fingerprint != "" && b.Fingerprint != "" {
		return a.Fingerprint == b.Fingerprint
	}
	return a.BizType == b.BizType && bytes.Equal(a.Payload, b.Payload) &&
		a.MaxRetry == b.MaxRetry && a.AckWait == b.AckWait && slices.Equal(a.Backoff, b.Backoff) &&
		maps.EqualFunc(a.Header, b.Header, slices.Equal)
}
