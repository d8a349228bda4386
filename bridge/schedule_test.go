package bridge

import (
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
