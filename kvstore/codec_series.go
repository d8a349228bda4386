package kvstore

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/axbridge/axbridge/kvstore/record"
)

// Series is a recurring task's schedule and progress (record.Series).
type Series = record.Series

// The misfire and overlap policies of a series (record's).
const (
	MisfireFireOnce  = record.MisfireFireOnce
	MisfireSkip      = record.MisfireSkip
	MisfireFireAll   = record.MisfireFireAll
	OverlapSkip      = record.OverlapSkip
	OverlapBufferOne = record.OverlapBufferOne
)

// seriesWire is the record's "series" field (subjects.md, "Task records"): durations and times in
// milliseconds. Only series records have it, so encoding/json's cost is paid by them alone.
type seriesWire struct {
	EveryMs   int64  `json:"every_ms,omitempty"`
	Cron      string `json:"cron,omitempty"`
	Zone      string `json:"tz,omitempty"`
	Misfire   string `json:"misfire"`
	CatchupMs int64  `json:"catchup_ms"`
	Overlap   string `json:"overlap"`
	MaxRuns   int    `json:"max_runs,omitempty"`
	Until     int64  `json:"until,omitempty"`
	JitterMs  int64  `json:"jitter_ms,omitempty"`
	Tick      int64  `json:"tick"`
	Next      int64  `json:"next,omitempty"`
	Run       int    `json:"run"`
	CatchUpTo int64  `json:"catch_up_to,omitempty"`
	Missed    int64  `json:"missed,omitempty"`
	Coalesced int64  `json:"coalesced,omitempty"`
	Skipped   int64  `json:"skipped,omitempty"`
	Dead      int64  `json:"dead,omitempty"`
	DeadRun   int    `json:"dead_run,omitempty"`
	DeadTry   int    `json:"dead_attempt,omitempty"`
	Ending    bool   `json:"ending,omitempty"`
}

// appendSeries writes `,"series":{...}`, or nothing for a one-shot task.
func appendSeries(b []byte, s *Series) []byte {
	if s == nil {
		return b
	}
	w := seriesWire{
		EveryMs: s.Every.Milliseconds(), Cron: s.Cron, Zone: s.Zone, Misfire: s.Misfire,
		CatchupMs: s.Catchup.Milliseconds(), Overlap: s.Overlap, MaxRuns: s.MaxRuns, Until: s.Until,
		JitterMs: s.Jitter.Milliseconds(), Tick: s.Tick, Next: s.Next, Run: s.Run,
		CatchUpTo: s.CatchUpTo, Missed: s.Missed, Coalesced: s.Coalesced, Skipped: s.Skipped,
		Dead: s.Dead, DeadRun: s.DeadRun, DeadTry: s.DeadAttempt, Ending: s.Ending,
	}
	j, err := json.Marshal(w)
	if err != nil { // a struct of strings, numbers and a bool always marshals
		panic(fmt.Sprintf("kvstore: encode series: %v", err))
	}
	b = append(b, `,"series":`...)
	return append(b, j...)
}

// series reads the "series" field's object.
func (d *metaDecoder) series() (*Series, error) {
	d.ws()
	start := d.i
	if d.peek() != '{' {
		return nil, d.errorf("series: want an object")
	}
	if err := d.skip(0); err != nil {
		return nil, err
	}
	var w seriesWire
	if err := json.Unmarshal(d.b[start:d.i], &w); err != nil {
		return nil, d.errorf("series: %v", err)
	}
	if err := w.check(); err != nil {
		return nil, d.errorf("series: %v", err)
	}
	ms := func(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
	return &Series{
		Every: ms(w.EveryMs), Cron: w.Cron, Zone: w.Zone, Misfire: w.Misfire,
		Catchup: ms(w.CatchupMs), Overlap: w.Overlap, MaxRuns: w.MaxRuns, Until: w.Until,
		Jitter: ms(w.JitterMs), Tick: w.Tick, Next: w.Next, Run: w.Run, CatchUpTo: w.CatchUpTo,
		Missed: w.Missed, Coalesced: w.Coalesced, Skipped: w.Skipped, Dead: w.Dead, DeadRun: w.DeadRun,
		DeadAttempt: w.DeadTry, Ending: w.Ending,
	}, nil
}

func (w *seriesWire) check() error {
	for _, n := range []int64{w.EveryMs, w.CatchupMs, w.JitterMs, int64(w.MaxRuns), int64(w.Run),
		w.Missed, w.Coalesced, w.Skipped, w.Dead, int64(w.DeadRun), int64(w.DeadTry)} {
		if n < 0 || n > maxDurationMS {
			return fmt.Errorf("a count or duration (%d) is out of range", n)
		}
	}
	if (w.EveryMs == 0) == (w.Cron == "") {
		return fmt.Errorf("want one of every_ms and cron")
	}
	switch w.Misfire {
	case record.MisfireFireOnce, record.MisfireSkip, record.MisfireFireAll:
	default:
		return fmt.Errorf("unknown misfire policy %q", w.Misfire)
	}
	switch w.Overlap {
	case record.OverlapSkip, record.OverlapBufferOne:
	default:
		return fmt.Errorf("unknown overlap policy %q", w.Overlap)
	}
	return nil
}
