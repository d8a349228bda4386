// Package series computes the ticks of a recurring task: every fixed interval, or the times a cron
// spec names in a time zone. It is pure: no clock, no I/O; times are UTC Unix milliseconds.
//
// Cron specs are parsed by github.com/robfig/cron/v3 (6 fields with seconds or 5 without, and the
// descriptors @yearly, @monthly, @weekly, @daily, @hourly), so that the bridge reads a spec as
// that widely used library and its users do.
package series

import (
	"errors"
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // zones without the system's database (a scratch image)

	"github.com/robfig/cron/v3"
)

// MinEvery is the shortest interval of an every-series.
const MinEvery = time.Second

// Errors of Parse; match them with errors.Is.
var (
	ErrEvery = errors.New("series: bad interval")
	ErrCron  = errors.New("series: bad cron spec")
	ErrZone  = errors.New("series: bad time zone")
)

// Spec is what a schedule message says of its series: an interval, or a cron spec in a zone.
type Spec struct {
	Every time.Duration // > 0 for an every-series
	Cron  string        // a cron spec otherwise
	Zone  string        // IANA zone of Cron; "" is UTC
}

// Schedule tells the ticks of a Spec.
type Schedule struct {
	every time.Duration
	cron  cron.Schedule
	loc   *time.Location
}

var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month |
	cron.Dow | cron.Descriptor)

// Parse checks s and returns its Schedule. The error wraps ErrEvery, ErrCron or ErrZone and says
// what is wrong.
func Parse(s Spec) (Schedule, error) {
	if s.Cron == "" {
		if s.Every < MinEvery {
			return Schedule{}, fmt.Errorf("%w: %v; the least is %v", ErrEvery, s.Every, MinEvery)
		}
		return Schedule{every: s.Every}, nil
	}
	loc := time.UTC
	if s.Zone != "" {
		l, err := time.LoadLocation(s.Zone)
		if err != nil || s.Zone == "Local" {
			return Schedule{}, fmt.Errorf("%w: %q is not an IANA time zone name", ErrZone, s.Zone)
		}
		loc = l
	}
	spec := strings.TrimSpace(s.Cron)
	if strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=") {
		return Schedule{}, fmt.Errorf("%w: %q: give the zone in its own header, not in the spec", ErrCron, s.Cron)
	}
	c, err := parser.Parse(spec)
	if err != nil {
		return Schedule{}, fmt.Errorf("%w: %q: %v", ErrCron, s.Cron, err)
	}
	return Schedule{cron: c, loc: loc}, nil
}

// Next returns the first tick after the instant after (UTC Unix ms), 0 when there is none (a
// cron spec that names no time within five years, such as 30 February).
func (s Schedule) Next(after int64) int64 {
	if s.cron == nil {
		return after + s.every.Milliseconds()
	}
	t := s.cron.Next(time.UnixMilli(after).In(s.loc))
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// First returns the series' first tick: from, when from is not 0 and the spec allows it (an
// every-series starts at the due time its message gives), otherwise the first tick after
// accepted (one interval from then, or the spec's next time).
func (s Schedule) First(from, accepted int64) int64 {
	switch {
	case s.cron == nil && from != 0:
		return from
	case s.cron == nil:
		return s.Next(accepted)
	case from != 0:
		return s.Next(from - 1)
	}
	return s.Next(accepted)
}
