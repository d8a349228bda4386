package series

import (
	"errors"
	"testing"
	"time"
)

func ms(s string) int64 {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UnixMilli()
}

func TestNext(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		spec  Spec
		after string
		want  string
	}{
		{"every", Spec{Every: 90 * time.Second}, "2026-12-01T08:00:00Z", "2026-12-01T08:01:30Z"},
		{"six fields", Spec{Cron: "*/15 * * * * *"}, "2026-12-01T08:00:07Z", "2026-12-01T08:00:15Z"},
		{"five fields", Spec{Cron: "0 */5 * * *"}, "2026-12-01T08:00:00Z", "2026-12-01T10:00:00Z"},
		{"minutes", Spec{Cron: "*/5 * * * *"}, "2026-12-01T08:01:00Z", "2026-12-01T08:05:00Z"},
		{"descriptor", Spec{Cron: "@hourly"}, "2026-12-01T08:00:00Z", "2026-12-01T09:00:00Z"},
		{"zone", Spec{Cron: "0 0 9 * * *", Zone: "Europe/Berlin"}, "2026-12-01T09:00:00Z", "2026-12-02T08:00:00Z"},
		{"zone in summer", Spec{Cron: "0 0 9 * * *", Zone: "Europe/Berlin"}, "2026-07-01T09:00:00Z", "2026-07-02T07:00:00Z"},
		{"never", Spec{Cron: "0 0 0 30 2 *"}, "2026-12-01T08:00:00Z", ""},
	} {
		s, err := Parse(c.spec)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := s.Next(ms(c.after))
		want := int64(0)
		if c.want != "" {
			want = ms(c.want)
		}
		if got != want {
			t.Errorf("%s: Next(%s) = %s, want %s", c.name, c.after, time.UnixMilli(got).UTC(), c.want)
		}
	}
}

func TestFirst(t *testing.T) {
	t.Parallel()
	every, _ := Parse(Spec{Every: time.Minute})
	cron, _ := Parse(Spec{Cron: "0 * * * *"})
	acc := ms("2026-12-01T08:00:10Z")
	due := ms("2026-12-01T08:30:00Z")
	for _, c := range []struct {
		name      string
		s         Schedule
		from, got int64
		want      string
	}{
		{"every from now", every, 0, every.First(0, acc), "2026-12-01T08:01:10Z"},
		{"every at due", every, due, every.First(due, acc), "2026-12-01T08:30:00Z"},
		{"cron from now", cron, 0, cron.First(0, acc), "2026-12-01T09:00:00Z"},
		{"cron from due", cron, due, cron.First(due, acc), "2026-12-01T09:00:00Z"},
		{"cron on a tick", cron, ms("2026-12-01T09:00:00Z"), cron.First(ms("2026-12-01T09:00:00Z"), acc), "2026-12-01T09:00:00Z"},
	} {
		if c.got != ms(c.want) {
			t.Errorf("%s: %s, want %s", c.name, time.UnixMilli(c.got).UTC(), c.want)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		spec Spec
		want error
	}{
		{Spec{Every: 999 * time.Millisecond}, ErrEvery},
		{Spec{}, ErrEvery},
		{Spec{Cron: "61 * * * *"}, ErrCron},
		{Spec{Cron: "* * *"}, ErrCron},
		{Spec{Cron: "CRON_TZ=UTC * * * * *"}, ErrCron},
		{Spec{Cron: "@sometimes"}, ErrCron},
		{Spec{Cron: "* * * * *", Zone: "Mars/Olympus"}, ErrZone},
		{Spec{Cron: "* * * * *", Zone: "Local"}, ErrZone},
	} {
		if _, err := Parse(c.spec); !errors.Is(err, c.want) {
			t.Errorf("Parse(%+v) = %v, want %v", c.spec, err, c.want)
		}
	}
}
