package bridge

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/kvstore"
)

func TestParseScheduleValid(t *testing.T) {
	t.Parallel()
	cfg := Config{}.withDefaults()
	accepted := time.Date(2026, 11, 29, 12, 0, 0, 500_000, time.UTC) // .0005s: due times round up
	base := accepted.UnixMilli() + 1
	tests := []struct {
		name   string
		header nats.Header
		check  func(t *testing.T, task kvstore.Task)
	}{
		{"defaults", nats.Header{}, func(t *testing.T, task kvstore.Task) {
			if task.DueAt != base || task.MaxRetry != 3 || task.AckWait != 30*time.Second || len(task.Backoff) != 3 {
				t.Errorf("task = %+v", task)
			}
			if u, err := uuid.Parse(task.ID); err != nil || u.Version() != 7 || u.Time() == 0 {
				t.Errorf("generated id %q: version %v, err %v", task.ID, u.Version(), err)
			}
		}},
		{"delay duration", nats.Header{HeaderDelay: {"1500ms"}}, func(t *testing.T, task kvstore.Task) {
			if task.DueAt != base+1500 {
				t.Errorf("due %d, want %d", task.DueAt, base+1500)
			}
		}},
		{"delay ms", nats.Header{HeaderDelay: {"30000"}}, func(t *testing.T, task kvstore.Task) {
			if task.DueAt != base+30000 {
				t.Errorf("due %d", task.DueAt)
			}
		}},
		{"deliver at rfc3339 nanos rounds up", nats.Header{HeaderDeliverAt: {"2026-11-29T12:00:10.000000001Z"}}, func(t *testing.T, task kvstore.Task) {
			if want := accepted.Truncate(time.Second).Add(10*time.Second).UnixMilli() + 1; task.DueAt != want {
				t.Errorf("due %d, want %d", task.DueAt, want)
			}
		}},
		{"deliver at unix ms, in the past within tolerance", nats.Header{HeaderDeliverAt: {"1796040000000"}}, func(t *testing.T, task kvstore.Task) {
			if task.DueAt != 1796040000000 {
				t.Errorf("due %d", task.DueAt)
			}
		}},
		{"policy and caller headers", nats.Header{HeaderTaskID: {"order-42"}, HeaderMaxRetry: {"0"}, HeaderAckWait: {"5s"},
			HeaderBackoff: {"1s, 2500ms,3000,1500us"}, "Trace": {"a", "b"}}, func(t *testing.T, task kvstore.Task) {
			if task.ID != "order-42" || task.MaxRetry != 0 || task.AckWait != 5*time.Second || len(task.Backoff) != 4 ||
				task.Backoff[1] != 2500*time.Millisecond || task.Backoff[2] != 3*time.Second || task.Backoff[3] != 2*time.Millisecond {
				t.Errorf("task = %+v", task)
			}
			if len(task.Header) != 1 || len(task.Header["Trace"]) != 2 {
				t.Errorf("caller headers = %v", task.Header)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			task, rej := cfg.parseSchedule(scheduleMsg{subject: "ax.schedule.orders", header: tt.header, payload: []byte("x"), accepted: accepted, seq: 7}, 0)
			if rej != nil {
				t.Fatalf("rejected: %v", rej)
			}
			if task.BizType != "orders" || task.Status != kvstore.StatusWaiting || string(task.Payload) != "x" {
				t.Errorf("task = %+v", task)
			}
			tt.check(t, task)
		})
	}
}

func TestGeneratedIDIsStable(t *testing.T) {
	t.Parallel()
	at := time.UnixMilli(1796040000123)
	a, b, c := generatedID(at, 41), generatedID(at, 41), generatedID(at, 42)
	if a != b || a == c {
		t.Fatalf("ids %s %s %s: want the same for the same message and different for another", a, b, c)
	}
	if kvstore.ValidateID(a) != nil || !strings.HasPrefix(a, "01") {
		t.Fatalf("id %s", a)
	}
}

func TestParseScheduleRejects(t *testing.T) {
	t.Parallel()
	cfg := Config{MaxPayload: 100}.withDefaults()
	accepted := time.Now()
	tests := []struct {
		subject string
		header  nats.Header
		payload int
		code    string
	}{
		{"ax.schedule.a.b", nil, 0, CodeBadBizType},
		{"ax.schedule.*", nil, 0, CodeBadBizType},
		{"ax.schedule.>", nil, 0, CodeBadBizType},
		{"ax.schedule.or$ders", nil, 0, CodeBadBizType},
		{"ax.schedule." + strings.Repeat("a", 65), nil, 0, CodeBadBizType},
		{"ax.schedule.o", nats.Header{HeaderTaskID: {""}}, 0, CodeBadTaskID},
		{"ax.schedule.o", nats.Header{HeaderTaskID: {"a b"}}, 0, CodeBadTaskID},
		{"ax.schedule.o", nats.Header{HeaderDelay: {"-1s"}}, 0, CodeBadDelay},
		{"ax.schedule.o", nats.Header{HeaderDelay: {"soon"}}, 0, CodeBadDelay},
		{"ax.schedule.o", nats.Header{HeaderDelay: {"99999999999999999999"}}, 0, CodeBadDelay},
		{"ax.schedule.o", nats.Header{HeaderDelay: {"9223372036854775"}}, 0, CodeBadDelay},
		{"ax.schedule.o", nats.Header{HeaderDelay: {"9000000h"}}, 0, CodeBadDelay},
		{"ax.schedule.o", nats.Header{HeaderDelay: {"100000h"}}, 0, CodeBeyondHorizon},
		{"ax.schedule.o", nats.Header{HeaderDeliverAt: {"tomorrow"}}, 0, CodeBadDeliverAt},
		{"ax.schedule.o", nats.Header{HeaderDeliverAt: {"2020-01-01T00:00:00Z"}}, 0, CodeDueInPast},
		{"ax.schedule.o", nats.Header{HeaderDeliverAt: {"2999-01-01T00:00:00Z"}}, 0, CodeBeyondHorizon},
		{"ax.schedule.o", nats.Header{HeaderDelay: {"1s"}, HeaderDeliverAt: {"0"}}, 0, CodeDelayAndDeliverAt},
		{"ax.schedule.o", nats.Header{HeaderMaxRetry: {"-1"}}, 0, CodeBadMaxRetry},
		{"ax.schedule.o", nats.Header{HeaderMaxRetry: {"101"}}, 0, CodeBadMaxRetry},
		{"ax.schedule.o", nats.Header{HeaderAckWait: {"10ms"}}, 0, CodeBadAckWait},
		{"ax.schedule.o", nats.Header{HeaderBackoff: {"1s,,2s"}}, 0, CodeBadBackoff},
		{"ax.schedule.o", nats.Header{HeaderBackoff: {"-1s"}}, 0, CodeBadBackoff},
		{"ax.schedule.o", nil, 101, CodePayloadTooLarge},
	}
	for _, tt := range tests {
		_, rej := cfg.parseSchedule(scheduleMsg{subject: tt.subject, header: tt.header, payload: make([]byte, tt.payload), accepted: accepted}, 0)
		if rej == nil || rej.code != tt.code {
			t.Errorf("%s %v: got %v, want %s", tt.subject, tt.header, rej, tt.code)
			continue
		}
		if rej.reason == "" {
			t.Errorf("%s: empty reason", tt.code)
		}
	}
}

// A repeated schedule is compared on what the client sent, not on the defaults the bridge filled
// in: a redelivery after an operator changed --backoff, --ack-wait or --max-retry (or read by a
// replica with other defaults) is a duplicate, and so is a header with bytes that are not UTF-8,
// even after the stored record went through the codec.
func TestSameContentComparesWhatTheClientSent(t *testing.T) {
	t.Parallel()
	accepted := time.Now()
	parse := func(cfg Config, biz string, payload string, h nats.Header) kvstore.Task {
		t.Helper()
		cfg = cfg.withDefaults()
		task, rej := cfg.parseSchedule(scheduleMsg{subject: "ax.schedule." + biz, header: h, payload: []byte(payload), accepted: accepted, seq: 1}, 0)
		if rej != nil {
			t.Fatalf("rejected: %v", rej)
		}
		return task
	}
	stored := func(task kvstore.Task) kvstore.Task {
		t.Helper()
		rec, err := kvstore.EncodeTask(&task)
		if err != nil {
			t.Fatal(err)
		}
		back, err := kvstore.DecodeTask(rec)
		if err != nil {
			t.Fatal(err)
		}
		return back
	}
	h := func(kv ...string) nats.Header {
		out := nats.Header{HeaderTaskID: {"order-42"}}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = append(out[kv[i]], kv[i+1])
		}
		return out
	}
	first := stored(parse(Config{}, "orders", "p", h("Trace", "t-1", "Bin", "\xff\xfe", HeaderDelay, "1h")))
	if !strings.HasPrefix(first.Fingerprint, "sha256:") || len(first.Fingerprint) != len("sha256:")+64 {
		t.Fatalf("fingerprint %q", first.Fingerprint)
	}
	retuned := Config{MaxAttempts: 9, AckWait: time.Minute, Backoff: []time.Duration{time.Second}}
	same := []struct {
		name string
		task kvstore.Task
	}{
		{"redelivered as is", parse(Config{}, "orders", "p", h("Trace", "t-1", "Bin", "\xff\xfe", HeaderDelay, "1h"))},
		{"other bridge defaults", parse(retuned, "orders", "p", h("Trace", "t-1", "Bin", "\xff\xfe", HeaderDelay, "1h"))},
		{"another due time", parse(Config{}, "orders", "p", h("Trace", "t-1", "Bin", "\xff\xfe", HeaderDeliverAt, strconv.FormatInt(accepted.UnixMilli()+5000, 10)))},
	}
	for _, s := range same {
		if !sameContent(&first, &s.task) {
			t.Errorf("%s: not the same content", s.name)
		}
	}
	different := []struct {
		name string
		task kvstore.Task
	}{
		{"bizType", parse(Config{}, "payments", "p", h("Trace", "t-1", "Bin", "\xff\xfe"))},
		{"payload", parse(Config{}, "orders", "q", h("Trace", "t-1", "Bin", "\xff\xfe"))},
		{"header byte", parse(Config{}, "orders", "p", h("Trace", "t-1", "Bin", "\xff\xfd"))},
		{"header values split", parse(Config{}, "orders", "p", h("Trace", "t-", "Trace", "1", "Bin", "\xff\xfe"))},
		{"extra header", parse(Config{}, "orders", "p", h("Trace", "t-1", "Bin", "\xff\xfe", "More", ""))},
		{"explicit policy", parse(Config{}, "orders", "p", h("Trace", "t-1", "Bin", "\xff\xfe", HeaderMaxRetry, "3"))},
	}
	for _, d := range different {
		if sameContent(&first, &d.task) {
			t.Errorf("%s differs, but compares as the same content", d.name)
		}
	}
	// A record written before fingerprints existed compares on its fields.
	legacy, again := first, parse(Config{}, "orders", "p", h("Trace", "t-1"))
	legacy.Fingerprint, legacy.Header = "", map[string][]string{"Trace": {"t-1"}}
	if !sameContent(&legacy, &again) {
		t.Error("a record without fingerprint and an equal schedule: not the same content")
	}
	again.Payload = []byte("q")
	if sameContent(&legacy, &again) {
		t.Error("a record without fingerprint and another payload: the same content")
	}
}

// The size limit is checked on the record the store writes, not on the raw bytes: header bytes
// that are not UTF-8 take more room in the record (base64) than on the wire, and the record adds
// its metadata. The same sizes in plain bytes fit.
func TestParseScheduleChecksTheEncodedRecord(t *testing.T) {
	t.Parallel()
	cfg := Config{}.withDefaults()
	const limit = 100_000
	msg := func(header string, payload int) scheduleMsg {
		return scheduleMsg{subject: "ax.schedule.orders", header: nats.Header{"Blob": {header}}, payload: make([]byte, payload),
			accepted: time.Now(), seq: 1}
	}
	_, rej := cfg.parseSchedule(msg(strings.Repeat("\xff", 60_000), 20_000), limit)
	if rej == nil || rej.code != CodePayloadTooLarge || !strings.Contains(rej.reason, "record") {
		t.Fatalf("80 KB with a 60 KB binary header: %v, want %s about the record", rej, CodePayloadTooLarge)
	}
	task, rej := cfg.parseSchedule(msg(strings.Repeat("a", 60_000), 20_000), limit)
	if rej != nil {
		t.Fatalf("80 KB of plain bytes: %v", rej)
	}
	if rec, _ := kvstore.EncodeTask(&task); len(rec) > limit {
		t.Fatalf("accepted a record of %d bytes over the limit %d", len(rec), limit)
	}
	if _, rej := cfg.parseSchedule(msg("", limit-100), limit); rej == nil || rej.code != CodePayloadTooLarge {
		t.Fatalf("a payload just under the limit, with the record's metadata over it: %v", rej)
	}
}

// The intake's own rejection codes are in the spec.
func TestIntakeCodesInSpec(t *testing.T) {
	t.Parallel()
	spec, err := os.ReadFile("../subjects.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{CodeStoreRefused, CodeStoreUnavailable, CodePayloadTooLarge} {
		if !strings.Contains(string(spec), "`"+c+"`") {
			t.Errorf("subjects.md does not mention `%s`", c)
		}
	}
}

// BenchmarkParseSchedule is the intake's CPU per message: validation, the fingerprint and the
// encoded-size check, for a 1 KiB payload with two caller headers.
func BenchmarkParseSchedule(b *testing.B) {
	cfg := Config{}.withDefaults()
	m := scheduleMsg{subject: "ax.schedule.orders", payload: make([]byte, 1024), accepted: time.Now(), seq: 1,
		header: nats.Header{HeaderTaskID: {"order-42"}, HeaderDelay: {"30m"}, "Trace-Id": {"t-1"}, "Tenant": {"acme"}}}
	b.ReportAllocs()
	for b.Loop() {
		if _, rej := cfg.parseSchedule(m, 1<<20); rej != nil {
			b.Fatal(rej)
		}
	}
}
