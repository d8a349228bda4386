package bridge

import (
	"cmp"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/kvstore"
	"github.com/axbridge/axbridge/series"
)

// The headers of a series (subjects.md, "Recurring tasks").
const (
	HeaderEvery    = "Ax-Every"
	HeaderCron     = "Ax-Cron"
	HeaderTimeZone = "Ax-Time-Zone"
	HeaderMisfire  = "Ax-Misfire"
	HeaderCatchup  = "Ax-Catchup-Window"
	HeaderOverlap  = "Ax-Overlap"
	// HeaderReplace: true replaces a task of the same id that has other content, unless it runs.
	HeaderReplace = "Ax-Replace"
	HeaderMaxRuns = "Ax-Max-Runs"
	HeaderUntil   = "Ax-Until"
	HeaderJitter  = "Ax-Jitter"
	// On a series' fire messages.
	HeaderOccurrence = "Ax-Occurrence"
	HeaderRun        = "Ax-Run"
)

// Rejection codes of a series.
const (
	CodeBadEvery        = "BAD_EVERY"
	CodeBadCron         = "BAD_CRON"
	CodeBadTimeZone     = "BAD_TIME_ZONE"
	CodeEveryAndCron    = "EVERY_AND_CRON"
	CodeBadSeriesPolicy = "BAD_SERIES_POLICY"
)

// DefaultCatchup is a series' catch-up window unless Ax-Catchup-Window says otherwise.
const DefaultCatchup = time.Hour

var seriesPolicyHeaders = [...]string{HeaderTimeZone, HeaderMisfire, HeaderCatchup, HeaderOverlap,
	HeaderMaxRuns, HeaderUntil, HeaderJitter}

// parseSeries makes t a series when the message asks for one: its first tick is t.DueAt when the
// message gave a due time (dueGiven), otherwise the spec's first after accepted. The bizType's
// settings give the misfire and overlap policies the headers do not.
func parseSeries(h nats.Header, t *kvstore.Task, dueGiven bool, accepted int64, biz BizSettings) *rejection {
	every, hasEvery := headerValue(h, HeaderEvery)
	spec, hasCron := headerValue(h, HeaderCron)
	if !hasEvery && !hasCron {
		for _, k := range seriesPolicyHeaders {
			if _, ok := h[k]; ok {
				return reject(CodeBadSeriesPolicy, "%s is given without %s or %s", k, HeaderEvery, HeaderCron)
			}
		}
		return nil
	}
	if hasEvery && hasCron {
		return reject(CodeEveryAndCron, "give either %s or %s, not both", HeaderEvery, HeaderCron)
	}
	s := &kvstore.Series{Misfire: cmp.Or(biz.Misfire, kvstore.MisfireFireOnce),
		Overlap: cmp.Or(biz.Overlap, kvstore.OverlapSkip), Catchup: DefaultCatchup, Run: 1}
	if hasEvery {
		d, err := parseDuration(every)
		if err != nil || d < series.MinEvery {
			return reject(CodeBadEvery, "%s %q: want a duration of at least %v", HeaderEvery, every, series.MinEvery)
		}
		s.Every = d
	} else {
		s.Cron = spec
		s.Zone = strings.TrimSpace(h.Get(HeaderTimeZone))
	}
	sch, err := series.Parse(series.Spec{Every: s.Every, Cron: s.Cron, Zone: s.Zone})
	switch {
	case errors.Is(err, series.ErrZone):
		return reject(CodeBadTimeZone, "%s %q: not an IANA time zone name such as Europe/Berlin", HeaderTimeZone, s.Zone)
	case err != nil:
		return reject(CodeBadCron, "%s %q: %s", HeaderCron, spec, strings.TrimPrefix(err.Error(), "series: bad cron spec: "))
	}
	if rej := parseSeriesPolicy(h, s); rej != nil {
		return rej
	}
	from := int64(0)
	if dueGiven {
		from = t.DueAt
	}
	s.Tick = sch.First(from, accepted)
	if s.Tick == 0 || (s.Until != 0 && s.Tick > s.Until) {
		return reject(CodeBadSeriesPolicy, "the series has no tick (before %s)", HeaderUntil)
	}
	if s.Every > 0 && s.Jitter >= s.Every {
		return reject(CodeBadSeriesPolicy, "%s %v: want less than the interval %v", HeaderJitter, s.Jitter, s.Every)
	}
	started, err := kvstore.StartSeries(kvstore.Task{ID: t.ID, Status: kvstore.StatusWaiting, Series: s})
	if err != nil {
		return reject(CodeBadSeriesPolicy, "%v", err)
	}
	t.Series, t.DueAt = started.Series, started.DueAt
	return nil
}

// parseSeriesPolicy reads the optional policy headers of a series into s.
func parseSeriesPolicy(h nats.Header, s *kvstore.Series) *rejection {
	bad := func(k, v, want string) *rejection {
		return reject(CodeBadSeriesPolicy, "%s %q: want %s", k, v, want)
	}
	if v, ok := headerValue(h, HeaderMisfire); ok {
		switch v = strings.TrimSpace(v); v {
		case kvstore.MisfireFireOnce, kvstore.MisfireSkip, kvstore.MisfireFireAll:
			s.Misfire = v
		default:
			return bad(HeaderMisfire, v, "fire-once, skip or fire-all")
		}
	}
	if v, ok := headerValue(h, HeaderOverlap); ok {
		switch v = strings.TrimSpace(v); v {
		case kvstore.OverlapSkip, kvstore.OverlapBufferOne:
			s.Overlap = v
		default:
			return bad(HeaderOverlap, v, "skip or buffer-one (occurrences of one series never run side by side)")
		}
	}
	if v, ok := headerValue(h, HeaderCatchup); ok {
		d, err := parseDuration(v)
		if err != nil || d < 0 || d > maxBackoffEntry {
			return bad(HeaderCatchup, v, "a duration from 0 to 30 days")
		}
		s.Catchup = d
	}
	if v, ok := headerValue(h, HeaderMaxRuns); ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 {
			return bad(HeaderMaxRuns, v, "an integer of at least 1")
		}
		s.MaxRuns = n
	}
	if v, ok := headerValue(h, HeaderUntil); ok {
		at, err := parseTime(v)
		if err != nil {
			return bad(HeaderUntil, v, "RFC 3339 or Unix milliseconds")
		}
		s.Until = at.UnixMilli()
	}
	if v, ok := headerValue(h, HeaderJitter); ok {
		d, err := parseDuration(v)
		if err != nil || d < 0 || d > maxBackoffEntry {
			return bad(HeaderJitter, v, "a duration from 0 to 30 days")
		}
		s.Jitter = d
	}
	return nil
}

// warnDST logs when a new cron series meets daylight saving time within a year.
func (b *Bridge) warnDST(t *kvstore.Task) {
	s := t.Series
	if s == nil || s.Cron == "" {
		return
	}
	sch, err := series.Parse(series.Spec{Cron: s.Cron, Zone: s.Zone})
	if err != nil {
		return
	}
	if w := sch.DSTWarning(b.cfg.Now().UnixMilli()); w != "" {
		b.log.Warn("a cron series meets daylight saving time (ax.api.task.get shows it as dst_warning)",
			"task_id", t.ID, "cron", s.Cron, "time_zone", s.Zone, "warning", w)
	}
}
