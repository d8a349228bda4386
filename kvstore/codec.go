package kvstore

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"
)

// Record format, version 1 (what `nats kv get` shows):
//
//	{"v":1,"id":"order-42","biz":"order.timeout","status":"WAITING","due":1767225600000,...}
//	<raw payload bytes>
//
// One line of JSON metadata, one '\n', then the payload exactly as given (no base64). JSON never
// contains a raw newline, so the first '\n' ends the metadata. encoding/json writes and reads the
// metadata (the struct recordMeta); its fields, in this order:
//
//	v            int       always 1
//	id           string    task id
//	biz          string    biz type
//	status       string    WAITING, RUNNING, SUCCESS, DEAD or CANCELLED
//	due          int       UTC Unix ms
//	attempt      int       attempts started so far
//	max_retry    int       retries after the first attempt
//	ack_wait_ms  int       milliseconds
//	backoff_ms   [int]     milliseconds, possibly []
//	lease_until  int       UTC Unix ms, omitted when 0
//	owner        string    omitted when ""
//	created      int       UTC Unix ms
//	updated      int       UTC Unix ms
//	finished     int       UTC Unix ms, omitted when 0
//	last_error   string    omitted when ""
//	claim        int       fencing token of the current attempt, omitted when 0
//	src          string    fingerprint of the schedule message, omitted when ""
//	hdr          {string:[string]}  the caller's headers, when every key and value is valid UTF-8;
//	                                omitted when empty; keys sorted, values in their order
//	hdr_b64      {string:[string]}  the caller's headers, when any key or value is not valid UTF-8:
//	                                the same shape with every key and value in standard base64
//	                                (padded); at most one of hdr and hdr_b64 is written
//
// Header keys and values come back byte for byte, whatever the bytes: the readable hdr when it can
// say them exactly, hdr_b64 otherwise. Empty values and repeated values keep their order; a key
// with no values is dropped. Other strings (last_error, owner, ...) have invalid UTF-8 replaced by
// U+FFFD.
//
// Readers ignore fields they do not know, so optional fields can be added within version 1 (a
// reader older than hdr_b64 sees such a record without headers). Records of e2b1414 and earlier
// are version 1 without claim, src and hdr_b64; subjects.md ("Task records") says how they are
// read.

// recordVersion is the only encoding version this build reads and writes.
const recordVersion = 1

// maxDurationMS is the largest millisecond count a time.Duration can hold.
const maxDurationMS = math.MaxInt64 / int64(time.Millisecond)

// ErrInvalidTask: the task cannot be encoded (no id, an unknown status, a negative count or
// duration); writing it again as it is can never succeed.
var ErrInvalidTask = errors.New("kvstore: invalid task")

// recordMeta is the metadata line of a version 1 record, field for field. The decoder reads the
// header fields and backoff_ms through types of their own (codec_decode.go).
type recordMeta struct {
	V          int64               `json:"v"`
	ID         string              `json:"id"`
	Biz        string              `json:"biz"`
	Status     Status              `json:"status"`
	Due        int64               `json:"due"`
	Attempt    int64               `json:"attempt"`
	MaxRetry   int64               `json:"max_retry"`
	AckWaitMS  int64               `json:"ack_wait_ms"`
	BackoffMS  []int64             `json:"backoff_ms"`
	LeaseUntil int64               `json:"lease_until,omitempty"`
	Owner      string              `json:"owner,omitempty"`
	Created    int64               `json:"created"`
	Updated    int64               `json:"updated"`
	Finished   int64               `json:"finished,omitempty"`
	LastError  string              `json:"last_error,omitempty"`
	Claim      uint64              `json:"claim,omitempty"`
	Src        string              `json:"src,omitempty"`
	Hdr        map[string][]string `json:"hdr,omitempty"`
	HdrB64     map[string][]string `json:"hdr_b64,omitempty"`
}

// EncodeTask encodes t in the record format above. Durations are truncated to whole milliseconds.
// Header keys and values are kept byte for byte (see hdr_b64); in other strings each byte of
// invalid UTF-8 is replaced by U+FFFD (as encoding/json does). Header keys without values are
// dropped. It fails, with an error wrapping ErrInvalidTask, only for a task that could not be
// decoded back: nil, no id, an unknown status, or a negative attempt, max retry, ack wait or
// backoff.
//
// len(EncodeTask(t)) is the size of the value a store writes for t; EncodedLen tells it without
// copying the payload.
func EncodeTask(t *Task) ([]byte, error) {
	var extra int
	if t != nil {
		extra = len(t.Payload)
	}
	b, err := encodeMeta(t, extra)
	if err != nil {
		return nil, err
	}
	return append(b, t.Payload...), nil
}

// EncodedLen is len(EncodeTask(t)), the size of the stored value, for a size check before a
// write; it encodes only the metadata. The error is EncodeTask's.
func EncodedLen(t *Task) (int, error) {
	b, err := encodeMeta(t, 0)
	if err != nil {
		return 0, err
	}
	return len(b) + len(t.Payload), nil
}

// encodeMeta returns the metadata line of t and its newline, in a buffer with room for extra
// more bytes.
func encodeMeta(t *Task, extra int) ([]byte, error) {
	if t == nil {
		return nil, fmt.Errorf("encode task: %w: nil task", ErrInvalidTask)
	}
	if err := checkEncodable(t); err != nil {
		return nil, fmt.Errorf("encode task %q: %w: %w", t.ID, ErrInvalidTask, err)
	}
	m := recordMeta{
		V: recordVersion, ID: t.ID, Biz: t.BizType, Status: t.Status, Due: t.DueAt,
		Attempt: int64(t.Attempt), MaxRetry: int64(t.MaxRetry), AckWaitMS: t.AckWait.Milliseconds(),
		BackoffMS: make([]int64, len(t.Backoff)), LeaseUntil: t.LeaseUntil, Owner: t.Owner,
		Created: t.CreatedAt, Updated: t.UpdatedAt, Finished: t.FinishedAt, LastError: t.LastError,
		Claim: t.Claim, Src: t.Fingerprint,
	}
	for i, d := range t.Backoff {
		m.BackoffMS[i] = d.Milliseconds()
	}
	if headerUTF8(t.Header) {
		m.Hdr = withValues(t.Header)
	} else {
		m.HdrB64 = base64Header(t.Header)
	}
	buf := bytes.NewBuffer(make([]byte, 0, 256+extra+metaSizeHint(t)))
	enc := json.NewEncoder(buf)
	// Plain text for a person reading `nats kv get`: no \u003c for '<' and the like.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&m); err != nil { // never fails for these field types
		return nil, fmt.Errorf("encode task %q: %w", t.ID, err)
	}
	return buf.Bytes(), nil // Encode ends the line with '\n'
}

func checkEncodable(t *Task) error {
	switch {
	case t.ID == "":
		return fmt.Errorf("empty id")
	case !validStatus(t.Status):
		return fmt.Errorf("unknown status %q", t.Status)
	case t.Attempt < 0:
		return fmt.Errorf("negative attempt %d", t.Attempt)
	case t.MaxRetry < 0:
		return fmt.Errorf("negative max retry %d", t.MaxRetry)
	case t.AckWait < 0:
		return fmt.Errorf("negative ack wait %v", t.AckWait)
	}
	for i, d := range t.Backoff {
		if d < 0 {
			return fmt.Errorf("negative backoff[%d] %v", i, d)
		}
	}
	return nil
}

func validStatus(s Status) bool {
	switch s {
	case StatusWaiting, StatusRunning, StatusSuccess, StatusDead, StatusCancelled:
		return true
	}
	return false
}

// metaSizeHint is roughly the size of the metadata's strings, so that the usual record costs one
// buffer.
func metaSizeHint(t *Task) int {
	n := len(t.ID) + len(t.BizType) + len(t.Owner) + len(t.LastError) + len(t.Fingerprint) + 21*len(t.Backoff)
	for k, vs := range t.Header {
		n += len(k) + 6
		for _, v := range vs {
			n += len(v) + 3
		}
	}
	if !headerUTF8(t.Header) {
		n += n / 3
	}
	return n
}

// withValues is h without its keys that have no values (h itself when it has none), nil when no
// key has values.
func withValues(h map[string][]string) map[string][]string {
	keep := 0
	for _, vs := range h {
		if len(vs) > 0 {
			keep++
		}
	}
	switch keep {
	case 0:
		return nil
	case len(h):
		return h
	}
	out := make(map[string][]string, keep)
	for k, vs := range h {
		if len(vs) > 0 {
			out[k] = vs
		}
	}
	return out
}

// base64Header is h with every key and value in standard, padded base64, keys without values
// dropped.
func base64Header(h map[string][]string) map[string][]string {
	enc := base64.StdEncoding.EncodeToString
	out := make(map[string][]string, len(h))
	for k, vs := range h {
		if len(vs) == 0 {
			continue
		}
		bs := make([]string, len(vs))
		for i, v := range vs {
			bs[i] = enc([]byte(v))
		}
		out[enc([]byte(k))] = bs
	}
	return out
}

// headerUTF8 reports whether every key and value of h (of keys with values) is valid UTF-8, so
// that hdr can hold them exactly.
func headerUTF8(h map[string][]string) bool {
	for k, vs := range h {
		if len(vs) == 0 {
			continue
		}
		if !utf8.ValidString(k) {
			return false
		}
		for _, v := range vs {
			if !utf8.ValidString(v) {
				return false
			}
		}
	}
	return true
}
