package kvstore

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// DecodeTask decodes a record written by EncodeTask. The error wraps ErrUnknownVersion when the
// record names another version, ErrCorrupt for anything else wrong, and says what. Empty payload,
// backoff and header come back nil. The payload is a copy: b may be reused.
//
// The metadata is read by encoding/json and must be strict JSON (RFC 8259). Beyond what
// encoding/json checks: field names are spelled exactly (a field that differs from a known one
// only in case is refused, and does not count as that field); a field set to null counts as
// absent; unknown fields are skipped; of repeated fields the last counts; hdr and hdr_b64 are not
// both given; null is no list entry or header value; invalid UTF-8 and lone surrogates in strings
// become U+FFFD. The keys and values of hdr_b64 must be standard, padded base64.
func DecodeTask(b []byte) (Task, error) {
	t, err := decodeTask(b)
	if err == nil && t.Payload != nil {
		t.Payload = bytes.Clone(t.Payload)
	}
	return t, err
}

// decodeTask is DecodeTask with the payload a part of b, for a caller that owns b for good.
func decodeTask(b []byte) (Task, error) {
	if len(b) == 0 {
		return Task{}, fmt.Errorf("%w: empty value", ErrCorrupt)
	}
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 {
		return Task{}, fmt.Errorf("%w: no newline after the metadata", ErrCorrupt)
	}
	meta, payload := b[:nl], b[nl+1:]
	m, err := decodeMeta(meta)
	if err != nil {
		return Task{}, err
	}
	t := Task{
		ID:          m.ID,
		BizType:     m.Biz,
		Status:      statusOf(m.Status),
		DueAt:       m.Due,
		Attempt:     int(m.Attempt),
		MaxRetry:    int(m.MaxRetry),
		AckWait:     time.Duration(m.AckWaitMS) * time.Millisecond,
		LeaseUntil:  m.LeaseUntil,
		Owner:       m.Owner,
		CreatedAt:   m.Created,
		UpdatedAt:   m.Updated,
		FinishedAt:  m.Finished,
		LastError:   m.LastError,
		Claim:       m.Claim,
		Fingerprint: m.Src,
	}
	if len(m.BackoffMS) > 0 {
		t.Backoff = make([]time.Duration, len(m.BackoffMS))
		for i, ms := range m.BackoffMS {
			t.Backoff[i] = time.Duration(ms) * time.Millisecond
		}
	}
	if t.Header, err = m.header(); err != nil {
		return Task{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if len(payload) > 0 {
		t.Payload = payload
	}
	return t, nil
}

// metaIn is recordMeta as the decoder reads it: the backoff list refuses null entries, and the
// header fields are decoded once it is known which of them the record has.
type metaIn struct {
	recordMeta
	BackoffMS []msValue       `json:"backoff_ms"`
	Hdr       json.RawMessage `json:"hdr"`
	HdrB64    json.RawMessage `json:"hdr_b64"`
}

// msValue is one entry of backoff_ms: an integer, not null.
type msValue int64

func (v *msValue) UnmarshalJSON(b []byte) error {
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("field %q: want integers, got %s", "backoff_ms", b)
	}
	*v = msValue(n)
	return nil
}

// fieldSeen is, for each field of the metadata, whether its (last) value is other than null.
type fieldSeen bool

func (s *fieldSeen) UnmarshalJSON(b []byte) error {
	*s = string(b) != "null"
	return nil
}

// requiredFields must be present and not null.
var requiredFields = []string{
	"id", "biz", "status", "due", "attempt", "max_retry", "ack_wait_ms", "backoff_ms", "created", "updated",
}

// knownFields are the metadata fields of version 1 (recordMeta's json names).
var knownFields = func() map[string]bool {
	known := make(map[string]bool)
	rt := reflect.TypeFor[recordMeta]()
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		known[name] = true
	}
	return known
}()

// decodeMeta reads the metadata line: once to learn which fields it names, exactly spelled and
// not null, and once into metaIn; then it checks the values.
func decodeMeta(meta []byte) (metaIn, error) {
	var seen map[string]fieldSeen
	if err := json.Unmarshal(meta, &seen); err != nil {
		return metaIn{}, metaError(meta, err)
	}
	if seen == nil {
		return metaIn{}, fmt.Errorf("%w: metadata: null, not an object", ErrCorrupt)
	}
	if !seen["v"] {
		return metaIn{}, fmt.Errorf("%w: missing field %q", ErrCorrupt, "v")
	}
	for k := range seen {
		if knownFields[k] {
			continue
		}
		for known := range knownFields {
			if strings.EqualFold(k, known) { // encoding/json would take it for known
				return metaIn{}, fmt.Errorf("%w: metadata: field %q: field names are case-sensitive, want %q", ErrCorrupt, k, known)
			}
		}
	}
	var m metaIn
	if err := json.Unmarshal(meta, &m); err != nil {
		return metaIn{}, metaError(meta, err)
	}
	if m.V != recordVersion {
		return metaIn{}, fmt.Errorf("%w: version %d (this build reads version %d): %s", ErrUnknownVersion, m.V, recordVersion, unknownVersionHelp)
	}
	for _, f := range requiredFields {
		if !seen[f] {
			return metaIn{}, fmt.Errorf("%w: missing field %q", ErrCorrupt, f)
		}
	}
	// A null after a value leaves the value in place (encoding/json); here it means absent.
	nulled := func(f string) bool { s, ok := seen[f]; return ok && !bool(s) }
	if nulled("lease_until") {
		m.LeaseUntil = 0
	}
	if nulled("owner") {
		m.Owner = ""
	}
	if nulled("finished") {
		m.Finished = 0
	}
	if nulled("last_error") {
		m.LastError = ""
	}
	if nulled("claim") {
		m.Claim = 0
	}
	if nulled("src") {
		m.Src = ""
	}
	if err := m.check(); err != nil {
		return metaIn{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return m, nil
}

// check reports the first value out of range.
func (m *metaIn) check() error {
	switch {
	case m.ID == "":
		return fmt.Errorf("empty id")
	case !validStatus(m.Status):
		return fmt.Errorf("unknown status %q", m.Status)
	case m.Attempt < 0 || m.Attempt > math.MaxInt:
		return fmt.Errorf("attempt %d is negative", m.Attempt)
	case m.MaxRetry < 0 || m.MaxRetry > math.MaxInt:
		return fmt.Errorf("max_retry %d is negative", m.MaxRetry)
	case m.AckWaitMS < 0 || m.AckWaitMS > maxDurationMS:
		return fmt.Errorf("ack_wait_ms %d out of range [0, %d]", m.AckWaitMS, maxDurationMS)
	case present(m.Hdr) && present(m.HdrB64):
		return fmt.Errorf("both hdr and hdr_b64")
	}
	for i, ms := range m.BackoffMS {
		if ms < 0 || int64(ms) > maxDurationMS {
			return fmt.Errorf("backoff_ms[%d] %d out of range [0, %d]", i, ms, maxDurationMS)
		}
	}
	return nil
}

func present(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// header decodes hdr or hdr_b64, whichever the record has: an object of lists of strings. Keys
// with an empty or null list are dropped; no key left is nil.
func (m *metaIn) header() (map[string][]string, error) {
	field, raw := "hdr", m.Hdr
	if present(m.HdrB64) {
		field, raw = "hdr_b64", m.HdrB64
	}
	if !present(raw) {
		return nil, nil
	}
	var in map[string][]*string
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, fmt.Errorf("metadata: field %q: %v", field, describe(err))
	}
	var h map[string][]string
	for k, ps := range in {
		if len(ps) == 0 {
			continue
		}
		vals := make([]string, len(ps))
		for i, p := range ps {
			if p == nil {
				return nil, fmt.Errorf("metadata: field %q: key %q: null value", field, k)
			}
			vals[i] = *p
		}
		if field == "hdr_b64" {
			key, err := unBase64(k)
			if err != nil {
				return nil, fmt.Errorf("metadata: field %q: key %q: %v", field, k, err)
			}
			k = key
			for i, v := range vals {
				if vals[i], err = unBase64(v); err != nil {
					return nil, fmt.Errorf("metadata: field %q: value %q: %v", field, v, err)
				}
			}
		}
		if h == nil {
			h = make(map[string][]string, len(in))
		}
		h[k] = vals
	}
	return h, nil
}

// unBase64 decodes standard, padded base64.
func unBase64(s string) (string, error) {
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil {
		return "", fmt.Errorf("bad base64: %v", err)
	}
	return string(b), nil
}

// statusOf returns s as one of the five status constants if it is one, so that a decoded record
// shares their strings.
func statusOf(s Status) Status {
	switch s {
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
	return s
}

// unknownVersionHelp is what to do about a record of an unknown version.
const unknownVersionHelp = "run the build that wrote it, or a later one, on this bucket; this one leaves the record alone"

// metaError is the error for metadata that encoding/json refused: ErrUnknownVersion if it names
// a version other than 1 (a later version may have another shape), ErrCorrupt otherwise.
func metaError(meta []byte, err error) error {
	if v, ok := probeVersion(meta); ok && v != "1" {
		return fmt.Errorf("%w: version %s (this build reads version %d): %s", ErrUnknownVersion, v, recordVersion, unknownVersionHelp)
	}
	return fmt.Errorf("%w: metadata: %v", ErrCorrupt, describe(err))
}

// describe words an encoding/json error: for a value of the wrong type, the field and what it
// wants; for bad syntax, the offset and what is wrong.
func describe(err error) string {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		want := "a string"
		switch typeErr.Type.Kind() {
		case reflect.Int64:
			want = "an integer"
		case reflect.Uint64:
			want = "a non-negative integer"
		case reflect.Slice:
			want = "a list"
		case reflect.Map:
			want = "an object"
		}
		field := strings.TrimPrefix(typeErr.Field, "recordMeta.") // metaIn's embedded struct
		if field == "" {
			return fmt.Sprintf("want %s, got %s", want, typeErr.Value)
		}
		return fmt.Sprintf("field %q: want %s, got %s", field, want, typeErr.Value)
	case errors.As(err, &syntaxErr):
		return fmt.Sprintf("offset %d: %v", syntaxErr.Offset, syntaxErr)
	}
	return err.Error()
}

// probeVersion pulls "v" out of metadata that did not decode as a version 1 record, so that a
// record of a later version is reported as such rather than as corrupt.
func probeVersion(meta []byte) (string, bool) {
	var p map[string]json.RawMessage
	if json.Unmarshal(meta, &p) != nil {
		return "", false
	}
	v := p["v"]
	if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return "", false
	}
	return string(v), true
}
