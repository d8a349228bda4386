package bridge

import (
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"
)

// judgeAlarms is the housekeeper's round: a bizType whose p99 over the window passes its
// threshold starts firing; a firing one whose p99 stayed at or under it for a whole window (or
// whose threshold was turned off) resolves.
func (b *Bridge) judgeAlarms(now time.Time) {
	a := b.alarm
	window := b.cfg.AlarmWindow
	stats := a.p99s(now, window)
	for biz, s := range stats {
		th := b.alarmThreshold(biz)
		if th <= 0 || s.p99 <= th {
			continue
		}
		a.mu.Lock()
		a.lastOut[biz] = now
		_, firing := a.firing[biz]
		a.mu.Unlock()
		if !firing {
			b.sendAlarm(alarmEvent{BizType: biz, State: "firing", P99: roundLate(s.p99), Threshold: th.String(),
				Since: now.UTC().Format(DueAtLayout), Samples: s.n}, now)
		}
	}
	a.mu.Lock()
	var resolve []alarmEvent
	for biz, ev := range a.firing {
		th := b.alarmThreshold(biz)
		if s, ok := stats[biz]; th > 0 && ok && s.p99 > th || th > 0 && now.Sub(a.lastOut[biz]) < window {
			continue
		}
		s := stats[biz]
		ev.State, ev.P99, ev.Threshold, ev.Samples = "resolved", roundLate(s.p99), th.String(), s.n
		ev.Since = now.UTC().Format(DueAtLayout)
		resolve = append(resolve, ev)
	}
	a.mu.Unlock()
	for _, ev := range resolve {
		b.sendAlarm(ev, now)
	}
}

// sendAlarm publishes ev on <prefix>.alarm.<bizType> and applies it here at once.
func (b *Bridge) sendAlarm(ev alarmEvent, now time.Time) {
	ev.Alarm, ev.Replica = "lateness", b.cfg.ReplicaID
	data, _ := json.Marshal(ev)
	if err := b.nc.Publish(b.cfg.subj.alarm+ev.BizType, data); err != nil {
		b.log.Warn("publish alarm", "biz_type", ev.BizType, "err", err)
		return
	}
	if ev.State == "firing" {
		b.log.Warn("lateness alarm: p99 over the threshold", "biz_type", ev.BizType, "p99", ev.P99,
			"threshold", ev.Threshold, "samples", ev.Samples, "window", b.cfg.AlarmWindow)
	} else {
		b.log.Info("lateness alarm resolved", "biz_type", ev.BizType, "p99", ev.P99, "threshold", ev.Threshold)
	}
	b.heardAlarm(ev, now)
}

// heardAlarm applies an alarm event, this replica's own or the housekeeper's.
func (b *Bridge) heardAlarm(ev alarmEvent, now time.Time) {
	a := b.alarm
	a.mu.Lock()
	defer a.mu.Unlock()
	switch ev.State {
	case "firing":
		if _, ok := a.firing[ev.BizType]; !ok {
			a.firing[ev.BizType] = ev
			if last, ok := a.lastOut[ev.BizType]; !ok || last.Before(now) {
				a.lastOut[ev.BizType] = now
			}
		}
		b.m.alarmActive.WithLabelValues(ev.BizType).Set(1)
	case "resolved":
		delete(a.firing, ev.BizType)
		delete(a.lastOut, ev.BizType)
		b.m.alarmActive.WithLabelValues(ev.BizType).Set(0)
	}
}

// subscribeAlarms listens to every replica's lateness reports and to the alarms.
func (b *Bridge) subscribeAlarms() ([]*nats.Subscription, error) {
	stats, err := b.nc.Subscribe(b.cfg.subj.stats+"lateness", func(m *nats.Msg) {
		var r lateReport
		if json.Unmarshal(m.Data, &r) == nil {
			b.alarm.hear(r, time.Now())
		}
	})
	if err != nil {
		return nil, err
	}
	alarm, err := b.nc.Subscribe(b.cfg.subj.alarm+">", func(m *nats.Msg) {
		var ev alarmEvent
		if json.Unmarshal(m.Data, &ev) == nil && ev.Replica != b.cfg.ReplicaID {
			b.heardAlarm(ev, time.Now())
		}
	})
	if err != nil {
		_ = stats.Unsubscribe()
		return nil, err
	}
	return []*nats.Subscription{stats, alarm}, nil
}

// roundLate is a p99 as the alarm shows it: a bucket's bound, to the ms (to 10µs under 10ms).
func roundLate(d time.Duration) string {
	if d < 10*time.Millisecond {
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}
