package series

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
)

// DSTWarning says, for a cron schedule in a zone with daylight saving time, the first tick within
// a year after from (UTC Unix ms) whose local time does not exist (a spring-forward gap: the
// spec skips that tick that day) or exists twice (a fall-back: the spec fires at both); "" when
// none does, or for an every-series.
func (s Schedule) DSTWarning(from int64) string {
	if s.cron == nil || s.loc == time.UTC {
		return ""
	}
	wall, ok := s.cron.(*cron.SpecSchedule)
	if !ok {
		return ""
	}
	utc := *wall
	utc.Location = time.UTC // the same fields, read as wall-clock times
	t := time.UnixMilli(from).In(s.loc)
	end := t.AddDate(1, 0, 0)
	for t.Before(end) {
		next := t.Add(time.Hour)
		_, o1 := t.Zone()
		if _, o2 := next.Zone(); o1 != o2 {
			at := transition(t, next)
			if w := s.affected(&utc, at, o1, o2); w != "" {
				return w
			}
		}
		t = next
	}
	return ""
}

// transition is the instant between a and b (an hour apart) at which the zone's offset changes.
func transition(a, b time.Time) time.Time {
	_, oa := a.Zone()
	for b.Sub(a) > time.Second {
		mid := a.Add(b.Sub(a) / 2)
		if _, om := mid.Zone(); om == oa {
			a = mid
		} else {
			b = mid
		}
	}
	return b
}

// affected says whether the wall-clock spec utc has a time in the local times that the offset
// change from o1 to o2 (seconds east of UTC) at instant at skips or repeats.
func (s Schedule) affected(utc *cron.SpecSchedule, at time.Time, o1, o2 int) string {
	wallAt := at.UTC().Add(time.Duration(o1) * time.Second) // the old offset's wall clock at the change
	delta := time.Duration(o2-o1) * time.Second
	start, stop, what := wallAt, wallAt.Add(delta), "does not exist (the clocks spring forward): the spec skips that tick that day"
	if delta < 0 {
		start, stop, what = wallAt.Add(delta), wallAt, "exists twice (the clocks fall back): the spec fires at both"
	}
	if n := utc.Next(start.Add(-time.Second)); n.Before(stop) {
		return fmt.Sprintf("local time %s on %s in %s %s", n.Format("15:04:05"), n.Format("2006-01-02"), s.loc, what)
	}
	return ""
}
