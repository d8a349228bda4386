package bridge

import (
	"context"
	"encoding/json"
	"math"
	"sync"
	"time"
)

// The lateness alarm (subjects.md, "Alarms"). Every replica counts the lateness of its fires by
// bizType in a mergeable histogram and publishes the counts every report interval on
// <prefix>.stats.lateness; every replica keeps the last window of everyone's reports. The
// housekeeper alone judges: when a bizType's p99 over the window passes its threshold, it
// publishes a firing alarm on <prefix>.alarm.<bizType>; once the p99 has stayed at or under the
// threshold for a whole window, a resolved one. Every replica listens to the alarms, so that the
// ax_alarm_active gauge is the same on each, and a new housekeeper knows what is firing.

const (
	// DefaultAlarmP99 is Config.AlarmP99 when it is 0.
	DefaultAlarmP99 = time.Second
	// DefaultAlarmWindow is Config.AlarmWindow when it is 0.
	DefaultAlarmWindow = time.Minute
	// DefaultAlarmOverdue is Config.AlarmOverdue when it is 0.
	DefaultAlarmOverdue = time.Minute
	// alarmReports is how many reports a replica sends per window.
	alarmReports = 12
	// lateSteps per doubling: a bucket's bound is 2^(1/4) times the one before, so a p99 is
	// known within 19%.
	lateSteps   = 4
	lateBuckets = lateSteps*24 + 1 // bucket 0 is ≤ 1ms, the last ≥ 2^24 ms (4.6 h)
)

// lateBucket is the bucket of lateness d.
func lateBucket(d time.Duration) int {
	ms := float64(d) / float64(time.Millisecond)
	if ms <= 1 {
		return 0
	}
	return min(int(math.Ceil(math.Log2(ms)*lateSteps)), lateBuckets-1)
}

// lateBound is the upper bound of bucket i.
func lateBound(i int) time.Duration {
	return time.Duration(math.Exp2(float64(i)/lateSteps) * float64(time.Millisecond)).Round(time.Microsecond)
}

// lateReport is one replica's counts since its last report: by bizType, [bucket, count] pairs.
type lateReport struct {
	Replica string                `json:"replica"`
	Biz     map[string][][2]int64 `json:"biz"`
	Overdue map[string]int64      `json:"overdue,omitempty"` // by bizType: its longest wait past due, ms
}

// alarmEvent is what <prefix>.alarm.<bizType> carries.
type alarmEvent struct {
	Alarm     string `json:"alarm"` // lateness or overdue
	BizType   string `json:"biz_type"`
	State     string `json:"state"`            // firing or resolved
	P99       string `json:"p99,omitempty"`    // lateness
	Oldest    string `json:"oldest,omitempty"` // overdue: the longest a task waited past due
	Threshold string `json:"threshold"`
	Since     string `json:"since"`
	Samples   int64  `json:"samples,omitempty"`
	Replica   string `json:"replica"` // the housekeeper that spoke
}

// alarms is one replica's part of the alarm.
type alarms struct {
	mu      sync.Mutex
	cur     map[string]*[lateBuckets]int64 // this replica's counts since its last report
	heard   []heardReport                  // everyone's reports within the window
	overdue map[string]heardOverdue        // by replica: its latest overdue figures
	firing  map[alarmKey]alarmEvent        // alarms that fire
	lastOut map[alarmKey]time.Time         // when a firing alarm's figure was last over (monotonic)
}

// alarmKey names one alarm: its kind (lateness, overdue) and bizType.
type alarmKey struct{ kind, biz string }

type heardOverdue struct {
	at   time.Time
	ages map[string]int64
}

type heardReport struct {
	at  time.Time // monotonic: when it arrived
	biz map[string][][2]int64
}

func newAlarms() *alarms {
	return &alarms{cur: map[string]*[lateBuckets]int64{}, overdue: map[string]heardOverdue{},
		firing: map[alarmKey]alarmEvent{}, lastOut: map[alarmKey]time.Time{}}
}

// observe counts one fire's lateness.
func (a *alarms) observe(bizType string, late time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.cur[bizType]
	if c == nil {
		c = new([lateBuckets]int64)
		a.cur[bizType] = c
	}
	c[lateBucket(late)]++
}

// take returns the counts since the last take, and starts anew.
func (a *alarms) take(replica string) lateReport {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := lateReport{Replica: replica, Biz: make(map[string][][2]int64, len(a.cur))}
	for biz, c := range a.cur {
		for i, n := range c {
			if n > 0 {
				r.Biz[biz] = append(r.Biz[biz], [2]int64{int64(i), n})
			}
		}
	}
	clear(a.cur)
	return r
}

// hear keeps a report that arrived at now.
func (a *alarms) hear(r lateReport, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.heard = append(a.heard, heardReport{at: now, biz: r.Biz})
	a.overdue[r.Replica] = heardOverdue{at: now, ages: r.Overdue}
}

// oldest is, by bizType, the longest wait past due that any replica reported within fresh.
func (a *alarms) oldest(now time.Time, fresh time.Duration) map[string]time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]time.Duration{}
	for r, h := range a.overdue {
		if now.Sub(h.at) > fresh {
			delete(a.overdue, r)
			continue
		}
		for biz, ms := range h.ages {
			out[biz] = max(out[biz], time.Duration(ms)*time.Millisecond)
		}
	}
	return out
}

// lateStat is a bizType's lateness over a window: its p99 and how many fires it is of.
type lateStat struct {
	p50, p99 time.Duration
	n        int64
}

// p99s merges the reports heard within window before now (dropping older ones) and returns each
// bizType's p99 and sample count.
func (a *alarms) p99s(now time.Time, window time.Duration) map[string]lateStat {
	a.mu.Lock()
	defer a.mu.Unlock()
	kept := a.heard[:0]
	sum := map[string]*[lateBuckets]int64{}
	for _, h := range a.heard {
		if now.Sub(h.at) > window {
			continue
		}
		kept = append(kept, h)
		for biz, pairs := range h.biz {
			c := sum[biz]
			if c == nil {
				c = new([lateBuckets]int64)
				sum[biz] = c
			}
			for _, p := range pairs {
				if p[0] >= 0 && p[0] < lateBuckets {
					c[p[0]] += p[1]
				}
			}
		}
	}
	clear(a.heard[len(kept):])
	a.heard = kept
	out := make(map[string]lateStat, len(sum))
	for biz, c := range sum {
		var total int64
		for _, n := range c {
			total += n
		}
		out[biz] = lateStat{quantile(c, total, 0.50), quantile(c, total, 0.99), total}
	}
	return out
}

// quantile is the bound of the bucket that holds the q quantile of c's total counts.
func quantile(c *[lateBuckets]int64, total int64, q float64) time.Duration {
	rank, seen := int64(math.Ceil(float64(total)*q)), int64(0)
	for i, n := range c {
		if seen += n; seen >= rank {
			return lateBound(i)
		}
	}
	return lateBound(lateBuckets - 1)
}

// alarmLoop reports this replica's lateness, and judges the alarms while it is the housekeeper,
// every window/alarmReports until ctx ends.
func (b *Bridge) alarmLoop(ctx context.Context) {
	every := b.cfg.AlarmWindow / alarmReports
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rep := b.alarm.take(b.cfg.ReplicaID)
		rep.Overdue = b.overdueAges(time.Now())
		data, _ := json.Marshal(rep)
		if err := b.nc.Publish(b.cfg.subj.stats+"lateness", data); err != nil {
			b.log.Debug("publish lateness report", "err", err)
		}
		if b.house.Load() {
			b.judgeAlarms(time.Now())
		}
	}
}

// overdueAges is, by bizType, how long this replica's most overdue task has waited (ms), from the
// loop's latest figures.
func (b *Bridge) overdueAges(now time.Time) map[string]int64 {
	p := b.oldestDue.Load()
	if p == nil || len(*p) == 0 {
		return nil
	}
	out := make(map[string]int64, len(*p))
	for biz, due := range *p {
		out[biz] = max(now.UnixMilli()-due, 0)
	}
	return out
}

// alarmThreshold is k's threshold (≤ 0 is off): for lateness the bizType's alarm_p99, else
// Config.AlarmP99; for overdue Config.AlarmOverdue.
func (b *Bridge) alarmThreshold(k alarmKey) time.Duration {
	if k.kind == "overdue" {
		return b.cfg.AlarmOverdue
	}
	if s := b.biz.get(k.biz).AlarmP99; s != "" {
		if d, err := parseDuration(s); err == nil {
			return d
		}
	}
	return b.cfg.AlarmP99
}
