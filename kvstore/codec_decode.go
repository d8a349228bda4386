package kvstore

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// DecodeTask decodes a record written by EncodeTask. The error wraps ErrUnknownVersion when the
// record names another version, ErrCorrupt for anything else wrong, and says what. Empty payload,
// backoff and header come back nil. The payload is a copy: b may be reused.
//
// The metadata must be strict JSON (RFC 8259) with field names spelled exactly; a field set to
// null counts as absent; unknown fields are skipped; of repeated fields the last counts (hdr and
// hdr_b64 count as one field); invalid UTF-8 and lone surrogates in strings become U+FFFD. The
// keys and values of hdr_b64 must be standard, padded base64.
func DecodeTask(b []byte) (Task, error) {
	t, err := decodeTask(b)
	if err == nil && t.Payload != nil {
		t.Payload = bytes.Clone(t.Payload)
	}
	return t, err
}

// decodeTask is DecodeTask with the payload a part of b, for a caller that owns b for good.
func decodeTask(b []byte) (Task, error) { return decodeTaskAs(b, "", nil) }

// recordDecoder decodes the records of one watch, on one goroutine, and keeps what repeats from
// one to the next so that it is not allocated again: the biz type of the record before.
type recordDecoder struct{ biz string }

// entry is decodeEntry for the watch's record of task id at rev: the task's ID is id itself (a
// part of the key) when the record names it, and its BizType is shared with the record before
// when they are the same.
func (rd *recordDecoder) entry(id string, rev uint64, val []byte) (Entry, error) {
	t, err := decodeTaskAs(val, id, rd)
	if err != nil {
		return Entry{}, fmt.Errorf("task %s revision %d: %w", id, rev, err)
	}
	if t.ID != id {
		return Entry{}, fmt.Errorf("task %s revision %d: %w: the record names task %q", id, rev, ErrCorrupt, t.ID)
	}
	return Entry{Task: t, Revision: rev}, nil
}

// partial is entry for the record header HdrRecord of task id at rev: an Entry with the record's
// whole state and Partial set, its payload not loaded.
func (rd *recordDecoder) partial(id string, rev uint64, meta []byte) (Entry, error) {
	t, err := decodeMetaAs(meta, id, rd)
	if err != nil {
		return Entry{}, fmt.Errorf("task %s revision %d: header %s: %w", id, rev, HdrRecord, err)
	}
	if t.ID != id {
		return Entry{}, fmt.Errorf("task %s revision %d: %w: the record names task %q", id, rev, ErrCorrupt, t.ID)
	}
	return Entry{Task: t, Revision: rev, Partial: true}, nil
}

// DecodeRecordHeader decodes the value of a record's HdrRecord header (its metadata line) into the
// task's state: every field but the payload, which stays empty. The error is DecodeTask's.
func DecodeRecordHeader(v string) (Task, error) {
	return decodeMetaAs([]byte(v), "", nil)
}

// decodeTaskAs is decodeTask that takes the ID from id, with no copy, when the record's id
// field is the same, and the BizType from rd (if not nil) likewise.
func decodeTaskAs(b []byte, id string, rd *recordDecoder) (Task, error) {
	if len(b) == 0 {
		return Task{}, fmt.Errorf("%w: empty value", ErrCorrupt)
	}
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 {
		return Task{}, fmt.Errorf("%w: no newline after the metadata", ErrCorrupt)
	}
	t, err := decodeMetaAs(b[:nl], id, rd)
	if err == nil && nl+1 < len(b) {
		t.Payload = b[nl+1:]
	}
	return t, err
}

// decodeMetaAs decodes a record's metadata line alone (decodeTaskAs without the payload): the
// task comes back with an empty payload.
func decodeMetaAs(meta []byte, id string, rd *recordDecoder) (Task, error) {
	var m metaFields
	d := metaDecoder{b: meta, id: id, rd: rd}
	if err := d.object(&m); err != nil {
		if v, ok := probeVersion(meta); ok && v != "1" {
			return Task{}, fmt.Errorf("%w: version %s (this build reads version %d): %s", ErrUnknownVersion, v, recordVersion, unknownVersionHelp)
		}
		return Task{}, fmt.Errorf("%w: metadata: %v", ErrCorrupt, err)
	}
	if m.seen&fV == 0 {
		return Task{}, fmt.Errorf("%w: missing field %q", ErrCorrupt, "v")
	}
	if m.v != recordVersion {
		return Task{}, fmt.Errorf("%w: version %d (this build reads version %d): %s", ErrUnknownVersion, m.v, recordVersion, unknownVersionHelp)
	}
	if err := m.check(); err != nil {
		return Task{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	t := Task{
		ID:          m.id,
		BizType:     m.biz,
		Header:      m.hdr,
		Status:      m.status,
		DueAt:       m.due,
		Attempt:     int(m.attempt),
		MaxRetry:    int(m.maxRetry),
		AckWait:     time.Duration(m.ackWaitMS) * time.Millisecond,
		Backoff:     m.backoff,
		LeaseUntil:  m.leaseUntil,
		Owner:       m.owner,
		CreatedAt:   m.created,
		UpdatedAt:   m.updated,
		FinishedAt:  m.finished,
		LastError:   m.lastError,
		Claim:       uint64(m.claim),
		Fingerprint: m.src,
		Series:      m.series,
	}
	return t, nil
}

// unknownVersionHelp is what to do about a record of an unknown version.
const unknownVersionHelp = "run the build that wrote it, or a later one, on this bucket; this one leaves the record alone"

// Bits of metaFields.seen: the required fields.
const (
	fV = 1 << iota
	fID
	fBiz
	fStatus
	fDue
	fAttempt
	fMaxRetry
	fAckWait
	fBackoff
	fCreated
	fUpdated
)

var requiredFields = []struct {
	bit  uint16
	name string
}{
	{fID, "id"}, {fBiz, "biz"}, {fStatus, "status"}, {fDue, "due"}, {fAttempt, "attempt"},
	{fMaxRetry, "max_retry"}, {fAckWait, "ack_wait_ms"}, {fBackoff, "backoff_ms"},
	{fCreated, "created"}, {fUpdated, "updated"},
}

// metaFields is the metadata line as read, before checks.
type metaFields struct {
	seen                                   uint16
	v, due, attempt, maxRetry, ackWaitMS   int64
	leaseUntil, created, updated, finished int64
	id, biz, owner, lastError, src         string
	claim                                  int64
	status                                 Status
	backoff                                []time.Duration
	hdr                                    map[string][]string
	series                                 *Series
}

// check reports the first missing or out-of-range field.
func (m *metaFields) check() error {
	for _, f := range requiredFields {
		if m.seen&f.bit == 0 {
			return fmt.Errorf("missing field %q", f.name)
		}
	}
	switch {
	case m.id == "":
		return fmt.Errorf("empty id")
	case !validStatus(m.status):
		return fmt.Errorf("unknown status %q", m.status)
	case m.attempt < 0 || m.attempt > math.MaxInt:
		return fmt.Errorf("attempt %d is negative", m.attempt)
	case m.maxRetry < 0 || m.maxRetry > math.MaxInt:
		return fmt.Errorf("max_retry %d is negative", m.maxRetry)
	case m.claim < 0:
		return fmt.Errorf("claim %d is negative", m.claim)
	case m.ackWaitMS < 0 || m.ackWaitMS > maxDurationMS:
		return fmt.Errorf("ack_wait_ms %d out of range [0, %d]", m.ackWaitMS, maxDurationMS)
	}
	return nil
}

// maxSkipDepth bounds the nesting of unknown fields' values.
const maxSkipDepth = 64

// metaDecoder parses the metadata line: one JSON object of known, flat fields.
type metaDecoder struct {
	b  []byte
	i  int
	id string         // the id the record is expected to name: taken as it is, not copied
	rd *recordDecoder // nil, or what the records before had
}

func (d *metaDecoder) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: "+format, append([]any{d.i}, args...)...)
}

func (d *metaDecoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\r', '\n':
			d.i++
		default:
			return
		}
	}
}

// peek skips white space and returns the next byte, 0 at the end.
func (d *metaDecoder) peek() byte {
	d.ws()
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

func (d *metaDecoder) expect(c byte) error {
	if d.peek() != c {
		return d.errorf("want %q", c)
	}
	d.i++
	return nil
}

// literal consumes word (true, false, null) if it comes next.
func (d *metaDecoder) literal(word string) bool {
	d.ws()
	if len(d.b)-d.i >= len(word) && string(d.b[d.i:d.i+len(word)]) == word {
		d.i += len(word)
		return true
	}
	return false
}

func (d *metaDecoder) object(m *metaFields) error {
	if err := d.expect('{'); err != nil {
		return err
	}
	if d.peek() != '}' {
		for {
			key, err := d.str()
			if err != nil {
				return err
			}
			if err := d.expect(':'); err != nil {
				return err
			}
			if err := d.field(m, key); err != nil {
				return err
			}
			if d.peek() != ',' {
				break
			}
			d.i++
		}
	}
	if err := d.expect('}'); err != nil {
		return err
	}
	if d.ws(); d.i != len(d.b) {
		return d.errorf("data after the object")
	}
	return nil
}

// field reads the value of one field into m.
func (d *metaDecoder) field(m *metaFields, key []byte) error {
	if d.literal("null") {
		m.unset(string(key))
		return nil
	}
	var err error
	switch string(key) {
	case "v":
		m.v, err = d.int("v")
		m.seen |= fV
	case "id":
		var s []byte
		if s, err = d.strField("id"); string(s) == d.id {
			m.id = d.id
		} else {
			m.id = string(s)
		}
		m.seen |= fID
	case "biz":
		var s []byte
		if s, err = d.strField("biz"); d.rd == nil {
			m.biz = string(s)
		} else if string(s) == d.rd.biz {
			m.biz = d.rd.biz
		} else {
			m.biz = string(s)
			d.rd.biz = m.biz
		}
		m.seen |= fBiz
	case "status":
		var s []byte
		if s, err = d.strField("status"); err == nil {
			m.status = statusOf(s)
		}
		m.seen |= fStatus
	case "due":
		m.due, err = d.int("due")
		m.seen |= fDue
	case "attempt":
		m.attempt, err = d.int("attempt")
		m.seen |= fAttempt
	case "max_retry":
		m.maxRetry, err = d.int("max_retry")
		m.seen |= fMaxRetry
	case "ack_wait_ms":
		m.ackWaitMS, err = d.int("ack_wait_ms")
		m.seen |= fAckWait
	case "backoff_ms":
		m.backoff, err = d.backoff()
		m.seen |= fBackoff
	case "lease_until":
		m.leaseUntil, err = d.int("lease_until")
	case "owner":
		m.owner, err = d.string("owner")
	case "created":
		m.created, err = d.int("created")
		m.seen |= fCreated
	case "updated":
		m.updated, err = d.int("updated")
		m.seen |= fUpdated
	case "finished":
		m.finished, err = d.int("finished")
	case "last_error":
		m.lastError, err = d.string("last_error")
	case "claim":
		m.claim, err = d.int("claim")
	case "src":
		m.src, err = d.string("src")
	case "hdr":
		m.hdr, err = d.header("hdr", nil)
	case "hdr_b64":
		m.hdr, err = d.header("hdr_b64", decodeBase64)
	case "series":
		m.series, err = d.series()
	default:
		err = d.skip(0)
	}
	return err
}

// unset handles a field given as null: it counts as absent.
func (m *metaFields) unset(key string) {
	switch key {
	case "v":
		m.seen &^= fV
	case "id":
		m.seen &^= fID
	case "biz":
		m.seen &^= fBiz
	case "status":
		m.seen &^= fStatus
	case "due":
		m.seen &^= fDue
	case "attempt":
		m.seen &^= fAttempt
	case "max_retry":
		m.seen &^= fMaxRetry
	case "ack_wait_ms":
		m.seen &^= fAckWait
	case "backoff_ms":
		m.seen &^= fBackoff
	case "created":
		m.seen &^= fCreated
	case "updated":
		m.seen &^= fUpdated
	case "lease_until":
		m.leaseUntil = 0
	case "owner":
		m.owner = ""
	case "finished":
		m.finished = 0
	case "last_error":
		m.lastError = ""
	case "claim":
		m.claim = 0
	case "src":
		m.src = ""
	case "series":
		m.series = nil
	case "hdr", "hdr_b64":
		m.hdr = nil
	}
}

// statusOf returns the status named by s, without allocating for the five known ones.
func statusOf(s []byte) Status {
	switch Status(s) {
	case StatusWaiting:
		return StatusWaiting
	case StatusRunning:
		return StatusRunning
	case StatusSuccess:
		return StatusSuccess
	case StatusDead:
		return StatusDead
	case StatusCancelled:
		return StatusCancelled
	}
	return Status(s)
}

// int reads a JSON integer that fits an int64 (no fraction, no exponent).
func (d *metaDecoder) int(field string) (int64, error) {
	d.ws()
	start := d.i
	neg := d.i < len(d.b) && d.b[d.i] == '-'
	if neg {
		d.i++
	}
	limit := uint64(math.MaxInt64)
	if neg {
		limit++
	}
	digits := d.i
	var n uint64
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		c := uint64(d.b[d.i] - '0')
		if n > (limit-c)/10 {
			d.i = start
			return 0, d.errorf("field %q: integer out of range", field)
		}
		n = n*10 + c
		d.i++
	}
	if d.i == digits || (d.b[digits] == '0' && d.i-digits > 1) ||
		(d.i < len(d.b) && (d.b[d.i] == '.' || d.b[d.i] == 'e' || d.b[d.i] == 'E')) {
		d.i = start
		return 0, d.errorf("field %q: want an integer", field)
	}
	if neg {
		return int64(-n), nil // -(1<<63) wraps to itself
	}
	return int64(n), nil
}

func (d *metaDecoder) string(field string) (string, error) {
	s, err := d.strField(field)
	return string(s), err
}

func (d *metaDecoder) strField(field string) ([]byte, error) {
	if d.peek() != '"' {
		return nil, d.errorf("field %q: want a string", field)
	}
	return d.str()
}

// str reads a JSON string. The result aliases the input unless the string has escapes or invalid
// UTF-8 (which becomes U+FFFD).
func (d *metaDecoder) str() ([]byte, error) {
	if err := d.expect('"'); err != nil {
		return nil, err
	}
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return d.b[start : d.i-1], nil
		case c == '\\' || c < 0x20:
			return d.strSlow(start)
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(d.b[d.i:])
			if r == utf8.RuneError && size == 1 {
				return d.strSlow(start)
			}
			d.i += size
		default:
			d.i++
		}
	}
	return nil, d.errorf("unterminated string")
}

// strSlow continues str at d.i, the first byte that needs work, into a new buffer.
func (d *metaDecoder) strSlow(start int) ([]byte, error) {
	out := make([]byte, d.i-start, d.i-start+16)
	copy(out, d.b[start:d.i])
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return out, nil
		case c < 0x20:
			return nil, d.errorf("control character %#x in a string", c)
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(d.b[d.i:])
			out = utf8.AppendRune(out, r) // RuneError for a bad byte
			d.i += size
		case c != '\\':
			out = append(out, c)
			d.i++
		default:
			if d.i+1 >= len(d.b) {
				return nil, d.errorf("unterminated string")
			}
			e := d.b[d.i+1]
			d.i += 2
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := hex4(d.b[d.i:])
				if !ok {
					return nil, d.errorf("bad \\u escape")
				}
				d.i += 4
				if utf16.IsSurrogate(r) {
					r = utf8.RuneError
					if rest := d.b[d.i:]; len(rest) >= 6 && rest[0] == '\\' && rest[1] == 'u' {
						if r2, ok := hex4(rest[2:]); ok {
							if pair := utf16.DecodeRune(d.runeBefore(), r2); pair != utf8.RuneError {
								r = pair
								d.i += 6
							}
						}
					}
				}
				out = utf8.AppendRune(out, r)
			default:
				return nil, d.errorf("bad escape \\%c", e)
			}
		}
	}
	return nil, d.errorf("unterminated string")
}

// runeBefore re-reads the \uXXXX escape that ends at d.i.
func (d *metaDecoder) runeBefore() rune {
	r, _ := hex4(d.b[d.i-4:])
	return r
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// backoff reads backoff_ms: a list of milliseconds, each a valid duration. An empty list is nil.
func (d *metaDecoder) backoff() ([]time.Duration, error) {
	if err := d.expect('['); err != nil {
		return nil, fmt.Errorf("field %q: %w", "backoff_ms", err)
	}
	var list []time.Duration
	if d.peek() != ']' {
		// Only numbers until the ']': their count sizes the list (a malformed one fails below).
		n := len(d.b) - d.i
		if end := bytes.IndexByte(d.b[d.i:], ']'); end >= 0 {
			n = end
		}
		list = make([]time.Duration, 0, 1+bytes.Count(d.b[d.i:d.i+n], []byte{','}))
		for {
			ms, err := d.int("backoff_ms")
			if err != nil {
				return nil, err
			}
			if ms < 0 || ms > maxDurationMS {
				return nil, fmt.Errorf("backoff_ms[%d] %d out of range [0, %d]", len(list), ms, maxDurationMS)
			}
			list = append(list, time.Duration(ms)*time.Millisecond)
			if d.peek() != ',' {
				break
			}
			d.i++
		}
	}
	if err := d.expect(']'); err != nil {
		return nil, err
	}
	return list, nil
}

// header reads hdr or hdr_b64 (named by field): an object of lists of strings, each key and value
// passed through decode unless it is nil. Keys with an empty or null list are dropped; an empty
// object is nil.
func (d *metaDecoder) header(field string, decode func([]byte) ([]byte, error)) (map[string][]string, error) {
	if err := d.expect('{'); err != nil {
		return nil, fmt.Errorf("field %q: %w", field, err)
	}
	str := func() (string, error) {
		s, err := d.strField(field)
		if err != nil || decode == nil {
			return string(s), err
		}
		if s, err = decode(s); err != nil {
			return "", d.errorf("field %q: %v", field, err)
		}
		return string(s), nil
	}
	var h map[string][]string
	if d.peek() != '}' {
		for {
			key, err := str()
			if err != nil {
				return nil, err
			}
			if err := d.expect(':'); err != nil {
				return nil, err
			}
			vals, err := d.headerValues(field, str)
			if err != nil {
				return nil, err
			}
			if len(vals) > 0 {
				if h == nil {
					h = make(map[string][]string)
				}
				h[key] = vals
			} else {
				delete(h, key)
			}
			if d.peek() != ',' {
				break
			}
			d.i++
		}
	}
	if err := d.expect('}'); err != nil {
		return nil, err
	}
	if len(h) == 0 {
		return nil, nil
	}
	return h, nil
}

func (d *metaDecoder) headerValues(field string, str func() (string, error)) ([]string, error) {
	if d.literal("null") {
		return nil, nil
	}
	if err := d.expect('['); err != nil {
		return nil, fmt.Errorf("field %q: %w", field, err)
	}
	var vals []string
	if d.peek() != ']' {
		for {
			v, err := str()
			if err != nil {
				return nil, err
			}
			vals = append(vals, v)
			if d.peek() != ',' {
				break
			}
			d.i++
		}
	}
	return vals, d.expect(']')
}

// decodeBase64 decodes standard, padded base64.
func decodeBase64(s []byte) ([]byte, error) {
	out := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
	n, err := base64.StdEncoding.Strict().Decode(out, s)
	if err != nil {
		return nil, fmt.Errorf("bad base64: %v", err)
	}
	return out[:n], nil
}

// skip reads over any JSON value (an unknown field's).
func (d *metaDecoder) skip(depth int) error {
	if depth > maxSkipDepth {
		return d.errorf("nested deeper than %d", maxSkipDepth)
	}
	switch d.peek() {
	case '"':
		_, err := d.str()
		return err
	case '{', '[':
		open := d.b[d.i]
		close := byte('}')
		if open == '[' {
			close = ']'
		}
		d.i++
		if d.peek() != close {
			for {
				if open == '{' {
					if _, err := d.strField("key"); err != nil {
						return err
					}
					if err := d.expect(':'); err != nil {
						return err
					}
				}
				if err := d.skip(depth + 1); err != nil {
					return err
				}
				if d.peek() != ',' {
					break
				}
				d.i++
			}
		}
		return d.expect(close)
	}
	if d.literal("true") || d.literal("false") || d.literal("null") {
		return nil
	}
	return d.number()
}

// number reads over a JSON number.
func (d *metaDecoder) number() error {
	start := d.i
	digits := func() int {
		n := 0
		for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	first := d.i
	if n := digits(); n == 0 || (n > 1 && d.b[first] == '0') {
		d.i = start
		return d.errorf("want a value")
	}
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		if digits() == 0 {
			return d.errorf("bad number")
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if digits() == 0 {
			return d.errorf("bad number")
		}
	}
	return nil
}

// probeVersion pulls "v" out of metadata that did not decode as a version 1 record, so that a
// record of a later version is reported as such rather than as corrupt.
func probeVersion(meta []byte) (string, bool) {
	var p struct {
		V json.RawMessage `json:"v"`
	}
	if json.Unmarshal(meta, &p) != nil || len(p.V) == 0 || (p.V[0] != '-' && (p.V[0] < '0' || p.V[0] > '9')) {
		return "", false
	}
	return string(p.V), true
}
