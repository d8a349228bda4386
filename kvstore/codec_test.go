package kvstore_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/axbridge/axbridge/kvstore"
)

// codecBase is a plausible WAITING task; cases below vary it.
func codecBase() kvstore.Task {
	return kvstore.Task{
		ID:        "order-42",
		BizType:   "order.timeout",
		Payload:   []byte(`{"order_id":42}`),
		Status:    kvstore.StatusWaiting,
		DueAt:     1767225600000,
		MaxRetry:  3,
		AckWait:   30 * time.Second,
		Backoff:   []time.Duration{10 * time.Second, 30 * time.Second, 60 * time.Second},
		CreatedAt: 1767223800000,
		UpdatedAt: 1767223800000,
	}
}

// codecGolden is the task stored in testdata/record-v1.txt.
func codecGolden() kvstore.Task {
	t := codecBase()
	t.Status = kvstore.StatusRunning
	t.Attempt = 2
	t.LeaseUntil = 1767225640000
	t.Owner = "bridge-a"
	t.UpdatedAt = 1767225610000
	t.LastError = `nak: "db down"`
	t.Header = map[string][]string{"Trace-Id": {"abc123"}, "X-Tag": {"a", "b"}}
	t.Payload = []byte("{\"order_id\":42,\n \"note\":\"two lines\"}")
	return t
}

func TestCodecRoundTrip(t *testing.T) {
	t.Parallel()
	with := func(f func(*kvstore.Task)) kvstore.Task {
		task := codecBase()
		f(&task)
		return task
	}
	binary := make([]byte, 300)
	for i := range binary {
		binary[i] = byte(i)
	}
	tests := []struct {
		name string
		task kvstore.Task
	}{
		{"waiting", codecBase()},
		{"running", with(func(t *kvstore.Task) {
			t.Status, t.Attempt, t.LeaseUntil, t.Owner = kvstore.StatusRunning, 1, 1767225630000, "bridge-1"
		})},
		{"claim and fingerprint", with(func(t *kvstore.Task) {
			t.Status, t.Attempt, t.LeaseUntil, t.Owner = kvstore.StatusRunning, 1, 1767225630000, "bridge-1"
			t.Claim, t.Fingerprint = 1<<40+7, "sha256:0f1e2d"
		})},
		{"success", with(func(t *kvstore.Task) {
			t.Status, t.Attempt, t.FinishedAt = kvstore.StatusSuccess, 1, 1767225601000
		})},
		{"dead", with(func(t *kvstore.Task) {
			t.Status, t.Attempt, t.FinishedAt, t.LastError = kvstore.StatusDead, 4, 1767225701000, "ack wait expired"
		})},
		{"cancelled", with(func(t *kvstore.Task) { t.Status, t.FinishedAt = kvstore.StatusCancelled, 1767225000000 })},
		{"empty payload", with(func(t *kvstore.Task) { t.Payload = nil })},
		{"binary payload", with(func(t *kvstore.Task) { t.Payload = append([]byte("\n\n\x00{"), binary...) })},
		{"payload only newlines", with(func(t *kvstore.Task) { t.Payload = []byte("\n\r\n") })},
		{"no backoff", with(func(t *kvstore.Task) { t.Backoff = nil })},
		{"zero everything", kvstore.Task{ID: "x", Status: kvstore.StatusWaiting}},
		{"headers", with(func(t *kvstore.Task) {
			t.Header = map[string][]string{
				"Nats-Msg-Id": {"m1"}, "X-Many": {"1", "2", "", "three"}, "é-ünï": {"日本語"},
			}
		})},
		{"unicode, quotes, control chars", with(func(t *kvstore.Task) {
			t.BizType = "订单.超时"
			t.Owner = "host \"a\" \\ b"
			t.LastError = "line1\nline2\r\t\x00\x01\x1f\x7f </script> & \u2028\u2029 😀"
			t.Header = map[string][]string{"K\"\n": {"v\\\x00"}}
		})},
		{"series", with(func(t *kvstore.Task) {
			t.Series = &kvstore.Series{Cron: "0 */5 * * * *", Zone: "Europe/Berlin", Misfire: "fire-all",
				Catchup: time.Hour, Overlap: "buffer-one", MaxRuns: 10, Until: 1767300000000,
				Jitter: 250 * time.Millisecond, Tick: 1767225600000, Next: 1767225900000, Run: 3,
				CatchUpTo: 1767225300000, Missed: 1, Coalesced: 2, Skipped: 3, Dead: 4, DeadRun: 2, DeadAttempt: 3, Ending: true}
		})},
		{"every series", with(func(t *kvstore.Task) {
			t.Series = &kvstore.Series{Every: 1500 * time.Millisecond, Misfire: "skip", Overlap: "skip",
				Tick: 1767225600000, Run: 1}
		})},
		{"large values", with(func(t *kvstore.Task) {
			t.DueAt, t.CreatedAt, t.UpdatedAt = 1<<62, -1<<62, -1
			t.LeaseUntil, t.FinishedAt = 9223372036854775807, -9223372036854775808
			t.Attempt, t.MaxRetry = 1<<40, 1<<50
			t.AckWait = 9223372036854 * time.Millisecond
			t.Backoff = []time.Duration{0, time.Millisecond, 9223372036854 * time.Millisecond}
			t.ID = strings.Repeat("a", kvstore.MaxIDLen)
			t.LastError = strings.Repeat("é\n", 5000)
			t.Payload = bytes.Repeat([]byte("x\n"), 1<<20)
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := kvstore.EncodeTask(&tt.task)
			if err != nil {
				t.Fatalf("EncodeTask: %v", err)
			}
			meta, _, ok := bytes.Cut(b, []byte("\n"))
			if !ok || !json.Valid(meta) {
				t.Fatalf("metadata line is not JSON: %q", meta)
			}
			got, err := kvstore.DecodeTask(b)
			if err != nil {
				t.Fatalf("DecodeTask: %v\nrecord: %q", err, meta)
			}
			if !reflect.DeepEqual(got, tt.task) {
				t.Errorf("round trip changed the task\n got: %+v\nwant: %+v\nmeta: %s", got, tt.task, meta)
			}
		})
	}
}

// Encoding normalises what has no meaning: empty slices and maps come back nil, header keys
// without values vanish, sub-millisecond durations are truncated, invalid UTF-8 outside the
// header becomes U+FFFD. Header bytes are not normalised (TestCodecHeaderBytes).
func TestCodecNormalises(t *testing.T) {
	t.Parallel()
	in := codecBase()
	in.Payload = []byte{}
	in.Backoff = []time.Duration{1500 * time.Microsecond}
	in.AckWait = 999 * time.Microsecond
	in.Header = map[string][]string{"Empty": {}, "Nil": nil, "Bad\xff-Empty": {}}
	in.LastError = "bad \xff byte"
	b, err := kvstore.EncodeTask(&in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := kvstore.DecodeTask(b)
	if err != nil {
		t.Fatal(err)
	}
	want := codecBase()
	want.Payload = nil
	want.Backoff = []time.Duration{time.Millisecond}
	want.AckWait = 0
	want.LastError = "bad \uFFFD byte"
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

// Header keys and values come back byte for byte: bytes that are not UTF-8, empty values and
// repeated values in their order. Valid UTF-8 stays readable in "hdr"; anything else goes to
// "hdr_b64", all of the header at once.
func TestCodecHeaderBytes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header map[string][]string
		field  string // the metadata field that must hold them
	}{
		{"utf-8", map[string][]string{"Trace": {"", "é", "", "\uFFFD"}, "日本": {"語"}}, `"hdr":`},
		{"bad value", map[string][]string{"Raw": {"\xff\xfe"}, "Plain": {"a", "", "a"}}, `"hdr_b64":`},
		{"bad key", map[string][]string{"K\xc3": {"v"}, "K": {"\x00\n\"x"}}, `"hdr_b64":`},
		{"large binary", map[string][]string{"Blob": {strings.Repeat("\xff", 200_000)}}, `"hdr_b64":`},
		{"truncated rune", map[string][]string{"T": {"ok", "\xe6\x97", ""}}, `"hdr_b64":`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := codecBase()
			in.Header = tt.header
			b, err := kvstore.EncodeTask(&in)
			if err != nil {
				t.Fatal(err)
			}
			meta, _, _ := bytes.Cut(b, []byte("\n"))
			if !json.Valid(meta) || !bytes.Contains(meta, []byte(tt.field)) {
				t.Fatalf("metadata %.300q: want valid JSON with %s", meta, tt.field)
			}
			if other := map[string]string{`"hdr":`: `"hdr_b64":`, `"hdr_b64":`: `"hdr":`}[tt.field]; bytes.Contains(meta, []byte(other)) {
				t.Fatalf("metadata %.300q has both header fields", meta)
			}
			got, err := kvstore.DecodeTask(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Header, tt.header) {
				t.Errorf("header came back as %q, want %q", got.Header, tt.header)
			}
			if n, err := kvstore.EncodedLen(&in); err != nil || n != len(b) {
				t.Errorf("EncodedLen = %d, %v; len(EncodeTask) = %d", n, err, len(b))
			}
		})
	}
	// A hand-written hdr_b64 must be strict base64.
	rec := func(hdr string) []byte {
		return []byte(`{"v":1,"id":"a","biz":"b","status":"WAITING","due":1,"attempt":0,"max_retry":3,` +
			`"ack_wait_ms":1,"backoff_ms":[],"created":1,"updated":1,"hdr_b64":` + hdr + "}\n")
	}
	if got, err := kvstore.DecodeTask(rec(`{"/w==":["","YQ=="]}`)); err != nil ||
		!reflect.DeepEqual(got.Header, map[string][]string{"\xff": {"", "a"}}) {
		t.Errorf("hdr_b64: %q, %v", got.Header, err)
	}
	for _, bad := range []string{`{"/w=":["YQ=="]}`, `{"YQ==":["!!"]}`, `{"YQ==":["YR=="]}`, `{"YQ==":"YQ=="}`} {
		if _, err := kvstore.DecodeTask(rec(bad)); !errors.Is(err, kvstore.ErrCorrupt) {
			t.Errorf("hdr_b64 %s: %v, want ErrCorrupt", bad, err)
		}
	}
}

// FuzzCodecHeader: any header bytes survive a round trip exactly.
func FuzzCodecHeader(f *testing.F) {
	f.Add("Trace-Id", "abc", "")
	f.Add("\xff", "\xfe\x00", "\u2028")
	f.Add("K", "\xed\xa0\x80", "\"\\")
	f.Fuzz(func(t *testing.T, key, v1, v2 string) {
		in := codecBase()
		in.Header = map[string][]string{key: {v1, v2}, "Other": {v2}}
		b, err := kvstore.EncodeTask(&in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := kvstore.DecodeTask(b)
		if err != nil {
			t.Fatalf("DecodeTask(EncodeTask(header %q)): %v", in.Header, err)
		}
		if !reflect.DeepEqual(got.Header, in.Header) {
			t.Fatalf("header %q came back as %q", in.Header, got.Header)
		}
		if n, err := kvstore.EncodedLen(&in); err != nil || n != len(b) {
			t.Fatalf("EncodedLen = %d, %v; len(EncodeTask) = %d", n, err, len(b))
		}
	})
}

func TestCodecDecodeCopiesPayload(t *testing.T) {
	t.Parallel()
	task := codecBase()
	b, err := kvstore.EncodeTask(&task)
	if err != nil {
		t.Fatal(err)
	}
	got, err := kvstore.DecodeTask(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 'X'
	}
	if string(got.Payload) != string(task.Payload) {
		t.Errorf("payload aliases the input: %q", got.Payload)
	}
}

func TestCodecGolden(t *testing.T) {
	t.Parallel()
	golden, err := os.ReadFile(filepath.Join("testdata", "record-v1.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := codecGolden()
	got, err := kvstore.DecodeTask(golden)
	if err != nil {
		t.Fatalf("DecodeTask(golden): %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DecodeTask(golden)\n got: %+v\nwant: %+v", got, want)
	}
	enc, err := kvstore.EncodeTask(&want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(enc, golden) {
		t.Errorf("EncodeTask differs from testdata/record-v1.txt\n got: %q\nwant: %q", enc, golden)
	}
}

func TestCodecEncodeRefuses(t *testing.T) {
	t.Parallel()
	with := func(f func(*kvstore.Task)) *kvstore.Task {
		task := codecBase()
		f(&task)
		return &task
	}
	tests := []struct {
		name string
		task *kvstore.Task
		want string
	}{
		{"nil", nil, "nil task"},
		{"empty id", with(func(t *kvstore.Task) { t.ID = "" }), "empty id"},
		{"no status", with(func(t *kvstore.Task) { t.Status = "" }), "unknown status"},
		{"bad status", with(func(t *kvstore.Task) { t.Status = "waiting" }), "unknown status"},
		{"negative attempt", with(func(t *kvstore.Task) { t.Attempt = -1 }), "negative attempt"},
		{"negative max retry", with(func(t *kvstore.Task) { t.MaxRetry = -1 }), "negative max retry"},
		{"negative ack wait", with(func(t *kvstore.Task) { t.AckWait = -time.Second }), "negative ack wait"},
		{"negative backoff", with(func(t *kvstore.Task) { t.Backoff[1] = -time.Second }), "negative backoff[1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := kvstore.EncodeTask(tt.task)
			if !errors.Is(err, kvstore.ErrInvalidTask) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("EncodeTask: err = %v, want ErrInvalidTask saying %q", err, tt.want)
			}
			if _, err := kvstore.EncodedLen(tt.task); !errors.Is(err, kvstore.ErrInvalidTask) {
				t.Errorf("EncodedLen: err = %v, want ErrInvalidTask", err)
			}
		})
	}
}

func TestCodecDecodeCorrupt(t *testing.T) {
	t.Parallel()
	const good = `"id":"a","biz":"b","status":"WAITING","due":1,"attempt":0,"max_retry":3,"ack_wait_ms":30000,"backoff_ms":[],"created":1,"updated":1`
	drop := func(field string) string {
		var kept []string
		for _, kv := range strings.Split(good, `,"`) {
			if !strings.HasPrefix(strings.TrimPrefix(kv, `"`), field+`"`) {
				kept = append(kept, strings.TrimPrefix(kv, `"`))
			}
		}
		return `{"v":1,"` + strings.Join(kept, `,"`) + "}\n"
	}
	set := func(field, value string) string {
		return strings.TrimSuffix(drop(field), "}\n") + `,"` + field + `":` + value + "}\n"
	}
	tests := []struct {
		name    string
		in      string
		wantErr error
		want    string // part of the message
	}{
		{"empty", "", kvstore.ErrCorrupt, "empty"},
		{"no newline", `{"v":1,` + good + `}`, kvstore.ErrCorrupt, "no newline"},
		{"only newline", "\n", kvstore.ErrCorrupt, "metadata"},
		{"not json", "hello\nworld", kvstore.ErrCorrupt, "metadata"},
		{"json array", "[1]\n", kvstore.ErrCorrupt, "metadata"},
		{"json null", "null\n", kvstore.ErrCorrupt, "metadata"},
		{"empty object", "{}\n", kvstore.ErrCorrupt, `missing field "v"`},
		{"v null", `{"v":null,` + good + "}\n", kvstore.ErrCorrupt, `missing field "v"`},
		{"key in other case", `{"V":1,` + good + "}\n", kvstore.ErrCorrupt, `missing field "v"`},
		{"raw control char in string", set("owner", "\"a\tb\""), kvstore.ErrCorrupt, "control character"},
		{"bad escape", set("owner", `"a\qb"`), kvstore.ErrCorrupt, "bad escape"},
		{"bad unicode escape", set("owner", `"\u12G4"`), kvstore.ErrCorrupt, "bad \\u escape"},
		{"unterminated string", `{"v":1,"id":"abc` + "\n", kvstore.ErrCorrupt, "unterminated"},
		{"unterminated escape", `{"v":1,"id":"abc\` + "\n", kvstore.ErrCorrupt, "unterminated"},
		{"leading zero", set("due", "01"), kvstore.ErrCorrupt, "want an integer"},
		{"exponent", set("due", "1e3"), kvstore.ErrCorrupt, "want an integer"},
		{"lone minus", set("due", "-"), kvstore.ErrCorrupt, "want an integer"},
		{"missing comma", `{"v":1 "id":"a"}` + "\n", kvstore.ErrCorrupt, "metadata"},
		{"trailing comma", `{"v":1,` + good + ",}\n", kvstore.ErrCorrupt, "metadata"},
		{"unknown field deeply nested", set("x", strings.Repeat("[", 100)+strings.Repeat("]", 100)), kvstore.ErrCorrupt, "nested deeper"},
		{"unknown field bad literal", set("x", "tru"), kvstore.ErrCorrupt, "metadata"},
		{"unknown field bad number", set("x", "1."), kvstore.ErrCorrupt, "bad number"},
		{"truncated json", `{"v":1,"id":"a"` + "\n", kvstore.ErrCorrupt, "metadata"},
		{"trailing garbage", `{"v":1,` + good + `}x` + "\n", kvstore.ErrCorrupt, "metadata"},
		{"base64 of a record", "eyJ2IjoxfQ==\n", kvstore.ErrCorrupt, "metadata"},
		{"version 2", `{"v":2,` + good + "}\n", kvstore.ErrUnknownVersion, "version 2"},
		{"version 0", `{"v":0}` + "\n", kvstore.ErrUnknownVersion, "version 0"},
		{"version 2 other shape", `{"v":2,"id":7}` + "\n", kvstore.ErrUnknownVersion, "version 2"},
		{"version -1", `{"v":-1,"due":"x"}` + "\n", kvstore.ErrUnknownVersion, "version -1"},
		{"version string", `{"v":"1",` + good + "}\n", kvstore.ErrCorrupt, "metadata"},
		{"version float", `{"v":1.5,` + good + "}\n", kvstore.ErrUnknownVersion, "version 1.5"},
		{"version missing", `{` + good + "}\n", kvstore.ErrCorrupt, `missing field "v"`},
		{"version 1 but wrong type", `{"v":1,"due":"soon"}` + "\n", kvstore.ErrCorrupt, "metadata"},
		{"id missing", drop("id"), kvstore.ErrCorrupt, `missing field "id"`},
		{"biz missing", drop("biz"), kvstore.ErrCorrupt, `missing field "biz"`},
		{"status missing", drop("status"), kvstore.ErrCorrupt, `missing field "status"`},
		{"due missing", drop("due"), kvstore.ErrCorrupt, `missing field "due"`},
		{"attempt missing", drop("attempt"), kvstore.ErrCorrupt, `missing field "attempt"`},
		{"max_retry missing", drop("max_retry"), kvstore.ErrCorrupt, `missing field "max_retry"`},
		{"ack_wait_ms missing", drop("ack_wait_ms"), kvstore.ErrCorrupt, `missing field "ack_wait_ms"`},
		{"backoff_ms missing", drop("backoff_ms"), kvstore.ErrCorrupt, `missing field "backoff_ms"`},
		{"backoff_ms null", set("backoff_ms", "null"), kvstore.ErrCorrupt, `missing field "backoff_ms"`},
		{"created missing", drop("created"), kvstore.ErrCorrupt, `missing field "created"`},
		{"updated missing", drop("updated"), kvstore.ErrCorrupt, `missing field "updated"`},
		{"id null", set("id", "null"), kvstore.ErrCorrupt, `missing field "id"`},
		{"id empty", set("id", `""`), kvstore.ErrCorrupt, "empty id"},
		{"id number", set("id", "5"), kvstore.ErrCorrupt, "metadata"},
		{"status unknown", set("status", `"PAUSED"`), kvstore.ErrCorrupt, `unknown status "PAUSED"`},
		{"status lower case", set("status", `"waiting"`), kvstore.ErrCorrupt, "unknown status"},
		{"status number", set("status", "1"), kvstore.ErrCorrupt, "metadata"},
		{"due float", set("due", "1.5"), kvstore.ErrCorrupt, "metadata"},
		{"due string", set("due", `"1"`), kvstore.ErrCorrupt, "metadata"},
		{"due overflow", set("due", "9223372036854775808"), kvstore.ErrCorrupt, "metadata"},
		{"attempt negative", set("attempt", "-1"), kvstore.ErrCorrupt, "attempt -1 is negative"},
		{"max_retry negative", set("max_retry", "-3"), kvstore.ErrCorrupt, "max_retry -3 is negative"},
		{"ack_wait_ms negative", set("ack_wait_ms", "-1"), kvstore.ErrCorrupt, "ack_wait_ms -1 out of range"},
		{"ack_wait_ms too large", set("ack_wait_ms", "9223372036855"), kvstore.ErrCorrupt, "ack_wait_ms 9223372036855 out of range"},
		{"backoff_ms negative", set("backoff_ms", "[1,-1]"), kvstore.ErrCorrupt, "backoff_ms[1] -1 out of range"},
		{"backoff_ms too large", set("backoff_ms", "[9223372036855]"), kvstore.ErrCorrupt, "backoff_ms[0]"},
		{"backoff_ms not a list", set("backoff_ms", "10"), kvstore.ErrCorrupt, "metadata"},
		{"backoff_ms strings", set("backoff_ms", `["10s"]`), kvstore.ErrCorrupt, "metadata"},
		{"hdr wrong shape", set("hdr", `{"K":"v"}`), kvstore.ErrCorrupt, "metadata"},
		{"hdr list", set("hdr", `["K"]`), kvstore.ErrCorrupt, "metadata"},
		{"lease_until string", set("lease_until", `"x"`), kvstore.ErrCorrupt, "metadata"},
		{"series not an object", set("series", `[1]`), kvstore.ErrCorrupt, "series: want an object"},
		{"series without a spec", set("series", `{"misfire":"skip","catchup_ms":0,"overlap":"skip","tick":1,"run":1}`), kvstore.ErrCorrupt, "one of every_ms and cron"},
		{"series with both specs", set("series", `{"every_ms":1000,"cron":"* * * * *","misfire":"skip","catchup_ms":0,"overlap":"skip","tick":1,"run":1}`), kvstore.ErrCorrupt, "one of every_ms and cron"},
		{"series unknown misfire", set("series", `{"every_ms":1000,"misfire":"later","catchup_ms":0,"overlap":"skip","tick":1,"run":1}`), kvstore.ErrCorrupt, `misfire policy "later"`},
		{"series unknown overlap", set("series", `{"every_ms":1000,"misfire":"skip","catchup_ms":0,"overlap":"allow","tick":1,"run":1}`), kvstore.ErrCorrupt, `overlap policy "allow"`},
		{"series negative run", set("series", `{"every_ms":1000,"misfire":"skip","catchup_ms":0,"overlap":"skip","tick":1,"run":-1}`), kvstore.ErrCorrupt, "out of range"},
		{"series bad field type", set("series", `{"every_ms":"1s","misfire":"skip","catchup_ms":0,"overlap":"skip","tick":1,"run":1}`), kvstore.ErrCorrupt, "series"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := kvstore.DecodeTask([]byte(tt.in))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("DecodeTask(%q): err = %v, want %v", tt.in, err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("DecodeTask(%q): err = %q, want it to say %q", tt.in, err, tt.want)
			}
		})
	}
}

// A record written by hand or by another writer may order fields freely, add unknown ones, use
// spaces and \u escapes; version 1 readers accept all of that.
func TestCodecDecodeLenient(t *testing.T) {
	t.Parallel()
	in := " { \"updated\" : 2 , \"future_field\": {\"x\":[1]}, \"v\":1, \"id\":\"\\u0061\", \"biz\":\"b\", " +
		"\"status\":\"DEAD\", \"due\":3, \"attempt\":4, \"max_retry\":3, \"ack_wait_ms\":5, \"backoff_ms\":[6,7], " +
		"\"created\":1, \"finished\":8, \"owner\":null, \"more\":[true,false,null,-1.5e+3,{\"a\":\"\\/\"}], \"hdr\":{\"K\":[],\"L\":[\"x\"]}, \"last_error\":\"\\ud83d\\ude00\"}\npayload"
	got, err := kvstore.DecodeTask([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := kvstore.Task{
		ID: "a", BizType: "b", Status: kvstore.StatusDead, DueAt: 3, Attempt: 4, MaxRetry: 3,
		AckWait: 5 * time.Millisecond, Backoff: []time.Duration{6 * time.Millisecond, 7 * time.Millisecond},
		CreatedAt: 1, UpdatedAt: 2, FinishedAt: 8, LastError: "😀",
		Header: map[string][]string{"L": {"x"}}, Payload: []byte("payload"),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

// Of a field given twice the last counts: a later null makes it absent, a later header object
// replaces the first rather than adding to it.
func TestCodecDecodeRepeated(t *testing.T) {
	t.Parallel()
	in := `{"v":1,"id":"a","biz":"b","status":"RUNNING","due":1,"attempt":1,"max_retry":3,"ack_wait_ms":5,` +
		`"backoff_ms":[1,2],"backoff_ms":[3],"created":1,"updated":2,"owner":"x","owner":null,"lease_until":9,"lease_until":null,` +
		`"claim":7,"claim":null,"claim":8,"last_error":"e","last_error":null,"src":"s","src":null,"finished":4,"finished":null,` +
		`"hdr":{"A":["1"]},"hdr":{"B":["2"]}}` + "\n"
	got, err := kvstore.DecodeTask([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := kvstore.Task{
		ID: "a", BizType: "b", Status: kvstore.StatusRunning, DueAt: 1, Attempt: 1, MaxRetry: 3,
		AckWait: 5 * time.Millisecond, Backoff: []time.Duration{3 * time.Millisecond}, CreatedAt: 1, UpdatedAt: 2,
		Claim: 8, Header: map[string][]string{"B": {"2"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func FuzzDecodeTask(f *testing.F) {
	golden, err := os.ReadFile(filepath.Join("testdata", "record-v1.txt"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(golden)
	f.Add([]byte(""))
	f.Add([]byte("\n"))
	f.Add([]byte(`{"v":2}` + "\n"))
	binHdr := codecBase()
	binHdr.Header = map[string][]string{"Raw": {"\xff", ""}, "K": {"v"}}
	for _, task := range []kvstore.Task{codecBase(), {ID: "x", Status: kvstore.StatusCancelled, Payload: []byte("\n\x00")}, binHdr} {
		b, err := kvstore.EncodeTask(&task)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		task, err := kvstore.DecodeTask(in)
		if err != nil {
			if !errors.Is(err, kvstore.ErrCorrupt) && !errors.Is(err, kvstore.ErrUnknownVersion) {
				t.Fatalf("DecodeTask(%q): error %v wraps neither ErrCorrupt nor ErrUnknownVersion", in, err)
			}
			return
		}
		enc, err := kvstore.EncodeTask(&task)
		if err != nil {
			t.Fatalf("EncodeTask(DecodeTask(%q)): %v", in, err)
		}
		again, err := kvstore.DecodeTask(enc)
		if err != nil {
			t.Fatalf("DecodeTask(EncodeTask(DecodeTask(%q))): %v\nencoded: %q", in, err, enc)
		}
		if !reflect.DeepEqual(again, task) {
			t.Fatalf("re-encoding changed the task\n first: %+v\nsecond: %+v\nencoded: %q", task, again, enc)
		}
	})
}

func BenchmarkCodec(b *testing.B) {
	task := codecBase()
	task.Header = map[string][]string{"Trace-Id": {"4bf92f3577b34da6a3ce929d0e0e4736"}}
	task.Payload = bytes.Repeat([]byte("0123456789abcdef"), 64) // 1 KiB
	enc, err := kvstore.EncodeTask(&task)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(enc)))
		for b.Loop() {
			if _, err := kvstore.EncodeTask(&task); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(enc)))
		for b.Loop() {
			if _, err := kvstore.DecodeTask(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
	// As a store reads a record (the payload not copied), and as a watch does (the id taken from
	// the key, the biz type shared with the record before).
	for _, c := range []struct {
		name   string
		decode func(string, uint64, []byte) (kvstore.Entry, error)
	}{{"entry", kvstore.DecodeEntryForTest}, {"watched", kvstore.NewWatchDecoderForTest()}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(enc)))
			for b.Loop() {
				if _, err := c.decode(task.ID, 1, enc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A watch decodes its records with one decoder that reuses the biz type of the record before and
// takes the id from the key: each record still decodes to what DecodeTask gives, whatever came
// before it, and a record that names another task than its key is corrupt.
func TestCodecDecodeWatched(t *testing.T) {
	t.Parallel()
	var ids []string
	var vals [][]byte
	var want []kvstore.Task
	for i, biz := range []string{"orders", "orders", "payments", "orders", "payments", "payments", "x"} {
		task := codecBase()
		task.ID, task.BizType = "t-"+string(rune('a'+i)), biz
		task.Backoff = task.Backoff[:i%3]
		val, err := kvstore.EncodeTask(&task)
		if err != nil {
			t.Fatal(err)
		}
		ids, vals = append(ids, task.ID), append(vals, val)
		dec, err := kvstore.DecodeTask(val)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, dec)
	}
	// An id written with an escape is the same id.
	escaped := []byte(strings.Replace(string(vals[0]), `"id":"t-a"`, `"id":"t-\u0061"`, 1))
	ids, vals, want = append(ids, "t-a"), append(vals, escaped), append(want, want[0])
	es, errs := kvstore.DecodeWatchedForTest(ids, vals)
	for i := range vals {
		if errs[i] != nil {
			t.Fatalf("record %d: %v", i, errs[i])
		}
		want[i].Payload = es[i].Task.Payload // DecodeTask copies it; the watch's aliases the value
		if !reflect.DeepEqual(es[i].Task, want[i]) || es[i].Revision != uint64(i+1) {
			t.Errorf("record %d: %+v, want %+v", i, es[i], want[i])
		}
	}
	_, errs = kvstore.DecodeWatchedForTest([]string{"t-b"}, vals[:1])
	if !errors.Is(errs[0], kvstore.ErrCorrupt) {
		t.Errorf("record of t-a under the key of t-b: %v, want ErrCorrupt", errs[0])
	}
}
