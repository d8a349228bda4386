package bridge

import (
	"cmp"
	"time"

	"github.com/axbridge/axbridge/kvstore"
	"github.com/axbridge/axbridge/series"
)

// SeriesView is a series as the task API shows it (subjects.md, "Recurring tasks").
type SeriesView struct {
	Every     string `json:"every,omitempty"`
	Cron      string `json:"cron,omitempty"`
	Zone      string `json:"time_zone,omitempty"`
	Misfire   string `json:"misfire"`
	Catchup   string `json:"catchup_window"`
	Overlap   string `json:"overlap"`
	MaxRuns   int    `json:"max_runs,omitempty"`
	Until     string `json:"until,omitempty"`
	Jitter    string `json:"jitter,omitempty"`
	Tick      string `json:"tick"`
	NextTick  string `json:"next_tick,omitempty"`
	Run       int    `json:"run"`
	Missed    int64  `json:"missed"`
	Coalesced int64  `json:"coalesced"`
	Skipped   int64  `json:"skipped"`
	Dead      int64  `json:"dead"`
	Ending    bool   `json:"ending,omitempty"`
	// DSTWarning: the next year's first cron tick that the zone's daylight saving time skips or
	// repeats (series.Schedule.DSTWarning), as of the get.
	DSTWarning string `json:"dst_warning,omitempty"`
}

func seriesViewOf(s *kvstore.Series) *SeriesView {
	if s == nil {
		return nil
	}
	v := &SeriesView{
		Cron: s.Cron, Misfire: s.Misfire, Catchup: s.Catchup.String(), Overlap: s.Overlap,
		MaxRuns: s.MaxRuns, Until: apiTime(s.Until), Tick: apiTime(s.Tick), NextTick: apiTime(s.Next), Run: s.Run,
		Missed: s.Missed, Coalesced: s.Coalesced, Skipped: s.Skipped, Dead: s.Dead, Ending: s.Ending,
	}
	if s.Every > 0 {
		v.Every = s.Every.String()
	} else {
		v.Zone = cmp.Or(s.Zone, "UTC")
		if sch, err := series.Parse(series.Spec{Cron: s.Cron, Zone: s.Zone}); err == nil {
			v.DSTWarning = sch.DSTWarning(time.Now().UnixMilli())
		}
	}
	if s.Jitter > 0 {
		v.Jitter = s.Jitter.String()
	}
	return v
}
