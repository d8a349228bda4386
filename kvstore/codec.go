package kvstore

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// Record format, version 1 (what `nats kv get` shows):
//
//	{"v":1,"id":"order-42","biz":"order.timeout","status":"WAITING","due":1767225600000,...}
//	<raw payload bytes>
//
// One line of JSON metadata, one '\n', then the payload exactly as given (no base64). JSON never
// contains a raw newline, so the first '\n' ends the metadata. On records of 1 KiB or more the
// JetStore writes the same line once more as the message header HdrRecord ("Ax-Record"), which a headers-only read decodes
// (DecodeRecordHeader) into the record's state without its payload; the body stays whole, so that
// `nats kv get` and readers that ignore the header see the full record. The line fits a header
// value: it is valid UTF-8 without control characters (the encoder escapes them) and starts and
// ends with a brace, so no reader trims it. Fields, in this order:
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
//	series       {...}     a recurring task's spec and progress (codec_series.go), omitted for a
//	                       one-shot task
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
//
// The codec is hand-written rather than encoding/json: an encoding/json decoder (with the checks
// below: exact field names, null as absent) made the bridge's restart to a loaded index of 1M
// records 2.9× slower in `axbridge bench` (issue 15).

// HdrRecord is the message header that repeats a stored record's metadata line (everything before
// the first '\n' of its value), on records of at least recordHeaderMin bytes whose line is at most
// recordHeaderMax. Other records, and records written before it existed, have none.
const HdrRecord = "Ax-Record"

// recordHeaderMin is the least encoded record that carries HdrRecord. The header pays only for
// large records: a headers-only load skips their payloads, while for a small record the second
// copy of the metadata line costs more than its payload (server RSS 1,248–1,495 against
// 1,645–1,780 B per pending task at 37-byte payloads in `axbridge bench --payload-bytes 37`), and
// a headers-only load reads such records whole anyway.
const recordHeaderMin = 1 << 10

// recordHeaderMax is the longest metadata line that HdrRecord repeats. The line holds the caller's
// headers and the last error, unbounded in size, and JetStream refuses a message whose headers
// exceed 64 KiB; the second copy also counts against the server's max payload. A record with a
// longer line has no header: a headers-only load reads it whole.
const recordHeaderMax = 8 << 10

// metaLine is the metadata line of an encoded record: everything before its first '\n' (all of
// val if there is none).
func metaLine(val []byte) []byte {
	if i := bytes.IndexByte(val, '\n'); i >= 0 {
		return val[:i]
	}
	return val
}

// recordVersion is the only encoding version this build reads and writes.
const recordVersion = 1

// maxDurationMS is the largest millisecond count a time.Duration can hold.
const maxDurationMS = math.MaxInt64 / int64(time.Millisecond)

// ErrInvalidTask: the task cannot be encoded (no id, an unknown status, a negative count or
// duration); writing it again as it is can never succeed.
var ErrInvalidTask = errors.New("kvstore: invalid task")

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
	if t == nil {
		return nil, fmt.Errorf("encode task: %w: nil task", ErrInvalidTask)
	}
	if err := checkEncodable(t); err != nil {
		return nil, fmt.Errorf("encode task %q: %w: %w", t.ID, ErrInvalidTask, err)
	}
	return appendTask(make([]byte, 0, encodedSizeHint(t)), t), nil
}

// EncodedLen is len(EncodeTask(t)), the size of the stored value, for a size check before a
// write; it encodes only the metadata. The error is EncodeTask's.
func EncodedLen(t *Task) (int, error) {
	if err := checkTask(t); err != nil {
		return 0, err
	}
	meta := *t
	meta.Payload = nil
	return len(appendTask(make([]byte, 0, encodedSizeHint(&meta)), &meta)) + len(t.Payload), nil
}

// checkTask is EncodeTask's check of t, with its error.
func checkTask(t *Task) error {
	if t == nil {
		return fmt.Errorf("encode task: %w: nil task", ErrInvalidTask)
	}
	if err := checkEncodable(t); err != nil {
		return fmt.Errorf("encode task %q: %w: %w", t.ID, ErrInvalidTask, err)
	}
	return nil
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

// encodedSizeHint is a close upper estimate of the encoded size when no string needs escaping,
// so that the usual record costs one allocation.
func encodedSizeHint(t *Task) int {
	n := 256 + len(t.ID) + len(t.BizType) + len(t.Owner) + len(t.LastError) + len(t.Fingerprint) + len(t.Payload) + 21*len(t.Backoff)
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

func appendTask(b []byte, t *Task) []byte {
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, recordVersion, 10)
	b = append(b, `,"id":`...)
	b = appendString(b, t.ID)
	b = append(b, `,"biz":`...)
	b = appendString(b, t.BizType)
	b = append(b, `,"status":`...)
	b = appendString(b, string(t.Status))
	b = append(b, `,"due":`...)
	b = strconv.AppendInt(b, t.DueAt, 10)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(t.Attempt), 10)
	b = append(b, `,"max_retry":`...)
	b = strconv.AppendInt(b, int64(t.MaxRetry), 10)
	b = append(b, `,"ack_wait_ms":`...)
	b = strconv.AppendInt(b, t.AckWait.Milliseconds(), 10)
	b = append(b, `,"backoff_ms":[`...)
	for i, d := range t.Backoff {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, d.Milliseconds(), 10)
	}
	b = append(b, ']')
	if t.LeaseUntil != 0 {
		b = append(b, `,"lease_until":`...)
		b = strconv.AppendInt(b, t.LeaseUntil, 10)
	}
	if t.Owner != "" {
		b = append(b, `,"owner":`...)
		b = appendString(b, t.Owner)
	}
	b = append(b, `,"created":`...)
	b = strconv.AppendInt(b, t.CreatedAt, 10)
	b = append(b, `,"updated":`...)
	b = strconv.AppendInt(b, t.UpdatedAt, 10)
	if t.FinishedAt != 0 {
		b = append(b, `,"finished":`...)
		b = strconv.AppendInt(b, t.FinishedAt, 10)
	}
	if t.LastError != "" {
		b = append(b, `,"last_error":`...)
		b = appendString(b, t.LastError)
	}
	if t.Claim != 0 {
		b = append(b, `,"claim":`...)
		b = strconv.AppendUint(b, t.Claim, 10)
	}
	if t.Fingerprint != "" {
		b = append(b, `,"src":`...)
		b = appendString(b, t.Fingerprint)
	}
	b = appendHeader(b, t.Header)
	b = appendSeries(b, t.Series)
	b = append(b, "}\n"...)
	return append(b, t.Payload...)
}

// appendHeader writes `,"hdr":{...}` (or `,"hdr_b64":{...}` when a key or value is not valid
// UTF-8) with sorted keys, skipping keys without values, or nothing.
func appendHeader(b []byte, h map[string][]string) []byte {
	var buf [16]string
	keys := buf[:0]
	for k, vs := range h {
		if len(vs) > 0 {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return b
	}
	slices.Sort(keys)
	str, field := appendString, `,"hdr":{`
	if !headerUTF8(h) {
		str, field = appendBase64, `,"hdr_b64":{`
	}
	b = append(b, field...)
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = str(b, k)
		b = append(b, ":["...)
		for j, v := range h[k] {
			if j > 0 {
				b = append(b, ',')
			}
			b = str(b, v)
		}
		b = append(b, ']')
	}
	return append(b, '}')
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

// appendBase64 appends s as a JSON string holding its standard, padded base64.
func appendBase64(b []byte, s string) []byte {
	b = append(b, '"')
	b = base64.StdEncoding.AppendEncode(b, []byte(s))
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. It escapes '"', '\\', control characters, DEL and
// U+2028/U+2029 (so a terminal and a JavaScript reader see plain text), and replaces each byte of
// invalid UTF-8 with U+FFFD. Everything else, including non-ASCII text, is copied as is.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != 0x7f {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, `\u202`...)
			b = append(b, hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
