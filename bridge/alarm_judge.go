package bridge

import (
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"
)

// judgeAlarms is the housekeeper's round: an alarm whose figure passes its threshold starts
// firing (lateness: a bizType's p99 over the window; overdue: the longest any replica's task of
// it has waited past due); a firing one whose figure stayed at or under it for a whole window
// (or whose threshold was turned off) resolves.
func (b *Bridge) judgeAlarms(now time.Time) {
	a := b.alarm
	window := b.cfg.AlarmWindow
	figures := map[alarmKey]alarmEvent{} // this round's figure of each alarm that has one
	over := map[alarmKey]bool{}
	for biz, s := range a.p99s(now, window) {
		k := alarmKey{"lateness", biz}
		th := b.alarmThreshold(k)
		figures[k] = alarmEvent{P99: roundLate(s.p99), Threshold: th.String(), Samples: s.n}
		over[k] = th > 0 && s.p99 > th
	}
	for biz, age := range a.oldest(now, 3*window/alarmReports) {
		k := alarmKey{"overdue", biz}
		th := b.alarmThreshold(k)
		figures[k] = alarmEvent{Oldest: age.Round(time.Millisecond).String(), Threshold: th.String()}
		over[k] = th > 0 && age > th
	}
	var send []alarmEvent
	a.mu.Lock()
	for k, isOver := range over {
		if !isOver {
			continue
		}
		a.lastOut[k] = now
		if _, firing := a.firing[k]; !firing {
			ev := figures[k]
			ev.Alarm, ev.BizType, ev.State, ev.Since = k.kind, k.biz, "firing", now.UTC().Format(DueAtLayout)
			send = append(send, ev)
		}
	}
	for k := range a.firing {
		th := b.alarmThreshold(k)
		if th > 0 && (over[k] || now.Sub(a.lastOut[k]) < window) {
			continue
		}
		ev := figures[k]
		ev.Alarm, ev.BizType, ev.State, ev.Since, ev.Threshold = k.kind, k.biz, "resolved", now.UTC().Format(DueAtLayout), th.String()
		send = append(send, ev)
	}
	a.mu.Unlock()
	for _, ev := range send {
		b.sendAlarm(ev, now)
	}
}

// sendAlarm publishes ev on <prefix>.alarm.<bizType> and applies it here at once.
func (b *Bridge) sendAlarm(ev alarmEvent, now time.Time) {
	ev.Replica = b.cfg.ReplicaID
	data, _ := json.Marshal(ev)
	if err := b.nc.Publish(b.cfg.subj.alarm+ev.BizType, data); err != nil {
		b.log.Warn("publish alarm", "biz_type", ev.BizType, "err", err)
		return
	}
	if ev.State == "firing" {
		b.log.Warn(ev.Alarm+" alarm firing: over the threshold", "biz_type", ev.BizType, "p99", ev.P99,
			"oldest", ev.Oldest, "threshold", ev.Threshold, "samples", ev.Samples, "window", b.cfg.AlarmWindow)
	} else {
		b.log.Info(ev.Alarm+" alarm resolved", "biz_type", ev.BizType, "p99", ev.P99, "oldest", ev.Oldest, "threshold", ev.Threshold)
	}
	b.heardAlarm(ev, now)
}

// heardAlarm applies an alarm event, this replica's own or the housekeeper's.
func (b *Bridge) heardAlarm(ev alarmEvent, now time.Time) {
	a := b.alarm
	k := alarmKey{ev.Alarm, ev.BizType}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch ev.State {
	case "firing":
		if _, ok := a.firing[k]; !ok {
			a.firing[k] = ev
			if last, ok := a.lastOut[k]; !ok || last.Before(now) {
				a.lastOut[k] = now
			}
		}
		b.m.alarmActive.WithLabelValues(ev.BizType, ev.Alarm).Set(1)
	case "resolved":
		delete(a.firing, k)
		delete(a.lastOut, k)
		b.m.alarmActive.WithLabelValues(ev.BizType, ev.Alarm).Set(0)
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
