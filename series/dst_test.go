package series

import (
	"strings"
	"testing"
	"time"
)

// A cron time in Europe/Berlin's spring-forward gap or fall-back repeat is named; one outside
// both, UTC and an every-series are not.
func TestDSTWarning(t *testing.T) {
	from := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	for _, tt := range []struct {
		cron, zone, want string
	}{
		{"0 30 2 * * *", "Europe/Berlin", "02:30:00 on 2027-03-28 in Europe/Berlin does not exist"},
		{"0 30 2 * * *", "America/New_York", "02:30:00 on 2027-03-14 in America/New_York does not exist"},
		{"0 15 2 * * 0", "Europe/Berlin", "02:15:00 on 2027-03-28"},
		{"0 30 2 31 10 *", "Europe/Berlin", "02:30:00 on 2027-10-31 in Europe/Berlin exists twice"},
		{"0 30 4 * * *", "Europe/Berlin", ""},
		{"0 30 2 * * *", "UTC", ""},
		{"0 30 2 * * *", "Asia/Tokyo", ""},
	} {
		s, err := Parse(Spec{Cron: tt.cron, Zone: tt.zone})
		if err != nil {
			t.Fatal(err)
		}
		got := s.DSTWarning(from)
		if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
			t.Errorf("%s in %s: %q, want %q", tt.cron, tt.zone, got, tt.want)
		}
	}
	every, _ := Parse(Spec{Every: time.Hour})
	if w := every.DSTWarning(from); w != "" {
		t.Errorf("every-series: %q", w)
	}
}
