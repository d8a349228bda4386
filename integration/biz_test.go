package integration

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/kvstore"
)

// bizSet sends ax.api.biz.set and returns the settings it answers with; a refusal fails the test.
func (e *env) bizSet(body string) bridge.BizSettings {
	e.t.Helper()
	s, code, msg := e.bizCall(bridge.APIBizSet, body)
	if code != "" {
		e.t.Fatalf("biz.set %s: %s %s", body, code, msg)
	}
	return s
}

// bizCall sends a settings API request: the answer, or the error code and message.
func (e *env) bizCall(subject, body string) (s bridge.BizSettings, code, msg string) {
	e.t.Helper()
	m, err := e.nc.Request(subject, []byte(body), 5*time.Second)
	if err != nil {
		e.t.Fatalf("%s %s: %v", subject, body, err)
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		return s, code, m.Header.Get("Nats-Service-Error")
	}
	if err := json.Unmarshal(m.Data, &s); err != nil {
		e.t.Fatalf("%s: %v in %q", subject, err, m.Data)
	}
	return s, "", ""
}

// The settings API on the wire: a partial set keeps the fields it leaves out, get and list show
// the result, bad input is refused with the field named and nothing stored, and a series that
// gives no Ax-Misfire takes its bizType's default.
func TestBizSettingsAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{})
	s := e.bizSet(`{"biz_type":"reports","max_in_flight":100,"rate":50,"burst":10,"misfire":"skip","alarm_p99":"500ms"}`)
	if s.MaxInFlight != 100 || s.Rate != 50 || s.Burst != 10 || s.Misfire != "skip" || s.AlarmP99 != "500ms" || s.Revision == 0 {
		t.Fatalf("set: %+v", s)
	}
	s = e.bizSet(`{"biz_type":"reports","paused":true}`)
	if !s.Paused || s.MaxInFlight != 100 || s.Rate != 50 || s.Misfire != "skip" {
		t.Fatalf("a partial set lost fields: %+v", s)
	}
	for _, bad := range []struct{ body, want string }{
		{`{"biz_type":"reports","max_in_flight":-1}`, "max_in_flight"},
		{`{"biz_type":"reports","misfire":"sometimes"}`, "misfire"},
		{`{"biz_type":"reports","overlap":"allow"}`, "overlap"},
		{`{"biz_type":"reports","alarm_p99":"soon"}`, "alarm_p99"},
		{`{"biz_type":"reports","max_inflight":3}`, "max_inflight"},
		{`{"biz_type":"a.b","paused":true}`, "biz_type"},
		{`not json`, "JSON"},
	} {
		_, code, msg := e.bizCall(bridge.APIBizSet, bad.body)
		if code != "400" || !strings.Contains(msg, bad.want) {
			t.Errorf("set %s: %q %q, want 400 naming %s", bad.body, code, msg, bad.want)
		}
	}
	got, code, _ := e.bizCall(bridge.APIBizGet, "reports")
	if code != "" || !got.Paused || got.MaxInFlight != 100 || got.Revision != s.Revision {
		t.Fatalf("get after bad sets: %+v %s, want %+v", got, code, s)
	}
	if none, code, _ := e.bizCall(bridge.APIBizGet, "nothing-set"); code != "" || none.Revision != 0 || none.Paused {
		t.Errorf("get of a bizType without settings: %+v %s", none, code)
	}
	e.bizSet(`{"biz_type":"alpha","overlap":"buffer-one"}`)
	var list []bridge.BizSettings
	if !checkFor(5*time.Second, func() bool {
		m, err := e.nc.Request(bridge.APIBizList, nil, 5*time.Second)
		list = nil
		return err == nil && json.Unmarshal(m.Data, &list) == nil && len(list) == 2
	}) || list[0].BizType != "alpha" || list[1].BizType != "reports" {
		t.Fatalf("list: %+v", list)
	}
	e.schedule("reports", "", bridge.HeaderTaskID, "daily", bridge.HeaderEvery, "1h")
	e.waitStatus("daily", kvstore.StatusWaiting, 5*time.Second)
	if g := e.getSeries("daily"); g.Series.Misfire != "skip" || g.Series.Overlap != "skip" {
		t.Errorf("a series of reports without Ax-Misfire: %+v, want misfire skip (the bizType's default)", g.Series)
	}
}

// Pause holds every task of its bizType, one-shot and series alike, while another bizType fires;
// resume fires the one-shot tasks that came due and the series once for the ticks it missed
// (fire-once), and the series goes on.
func TestBizPauseResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{})
	e.bizSet(`{"biz_type":"held","paused":true}`)
	var mu sync.Mutex
	heldFires := map[string]int{}
	e.consume("ax.fire.held", func(m *nats.Msg) {
		mu.Lock()
		heldFires[m.Header.Get(bridge.HeaderTaskID)]++
		mu.Unlock()
		_ = m.Ack()
	})
	free := e.consume("ax.fire.free", func(m *nats.Msg) { _ = m.Ack() })
	for i := range 20 {
		e.schedule("held", "", bridge.HeaderTaskID, fmt.Sprintf("held-%d", i), bridge.HeaderDelay, "100ms")
	}
	e.schedule("held", "", bridge.HeaderTaskID, "held-series", bridge.HeaderEvery, "1s", bridge.HeaderDelay, "100ms")
	e.schedule("free", "", bridge.HeaderTaskID, "free-1", bridge.HeaderDelay, "100ms")
	free.next(t, 5*time.Second)
	<-time.After(3 * time.Second) // three ticks of the series, and the one-shot tasks long due
	mu.Lock()
	n := len(heldFires)
	mu.Unlock()
	if n != 0 {
		t.Fatalf("%d tasks of a paused bizType fired", n)
	}
	e.waitStatus("held-0", kvstore.StatusWaiting, time.Second)
	e.bizSet(`{"biz_type":"held","paused":false}`)
	for i := range 20 {
		e.waitStatus(fmt.Sprintf("held-%d", i), kvstore.StatusSuccess, 10*time.Second)
	}
	if !checkFor(10*time.Second, func() bool { return e.getSeries("held-series").Series.Run >= 2 }) {
		t.Fatal("the series did not go on after resume")
	}
	g := e.getSeries("held-series")
	if g.Series.Coalesced < 2 {
		t.Errorf("after a 3s pause of a 1s series: %+v, want at least 2 ticks coalesced into one fire", g.Series)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, k := range heldFires {
		if k != 1 && id != "held-series" {
			t.Errorf("%s fired %d times", id, k)
		}
	}
}

// inFlightLog counts, from the consumer's side, the attempts of a bizType it holds: each is held
// for hold, then let go of before its ack goes out, so the count never runs ahead of the bridge's.
type inFlightLog struct {
	mu        sync.Mutex
	cur, peak int
	fired     map[string]int
	firedAt   []time.Time // Ax-Fired-At of each fire
}

func (e *env) holdFires(subject string, hold time.Duration) *inFlightLog {
	l := &inFlightLog{fired: map[string]int{}}
	e.consume(subject, func(m *nats.Msg) {
		at, err := time.Parse(time.RFC3339Nano, m.Header.Get(bridge.HeaderFiredAt))
		if err != nil {
			e.t.Errorf("fire without %s: %v", bridge.HeaderFiredAt, m.Header)
		}
		l.mu.Lock()
		l.cur++
		l.peak = max(l.peak, l.cur)
		l.fired[m.Header.Get(bridge.HeaderTaskID)]++
		l.firedAt = append(l.firedAt, at)
		l.mu.Unlock()
		go func() {
			<-time.After(hold)
			l.mu.Lock()
			l.cur--
			l.mu.Unlock()
			_ = m.Ack()
		}()
	})
	return l
}

// limitedBurst starts three replicas (a short ack wait, so that a joiner's first window is short),
// sets bizType limited's settings, schedules n tasks of it due at once, and waits for all of them.
func limitedBurst(t *testing.T, settings string, n int, hold time.Duration) *inFlightLog {
	e := newEnv(t)
	cfg := func(id string) bridge.Config { return bridge.Config{ReplicaID: id, AckWait: 2 * time.Second} }
	e.startBridge(cfg("r1"))
	e.bizSet(settings)
	e.startBridge(cfg("r2"))
	e.startBridge(cfg("r3"))
	l := e.holdFires("ax.fire.limited", hold)
	for i := range n {
		e.schedule("limited", "", bridge.HeaderTaskID, fmt.Sprintf("lim-%03d", i), bridge.HeaderDelay, "500ms")
	}
	for i := range n {
		e.waitStatus(fmt.Sprintf("lim-%03d", i), kvstore.StatusSuccess, time.Minute)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, k := range l.fired {
		if k != 1 {
			t.Errorf("%s fired %d times", id, k)
		}
	}
	if len(l.fired) != n {
		t.Errorf("%d tasks fired, want %d", len(l.fired), n)
	}
	return l
}

// max_in_flight holds across three replicas: the consumer never holds more attempts of the
// bizType than that at once, counted on its side.
func TestBizMaxInFlightThreeReplicas(t *testing.T) {
	t.Parallel()
	l := limitedBurst(t, `{"biz_type":"limited","max_in_flight":10}`, 300, 50*time.Millisecond)
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Logf("300 tasks, max_in_flight 10 on 3 replicas: at most %d held at once by the consumer", l.peak)
	if l.peak > 10 {
		t.Errorf("the consumer held %d attempts at once, above max_in_flight 10", l.peak)
	}
}

// rate holds across three replicas: 100 tasks due at once at rate 20/s with bursts of 5 take at
// least (100-5)/20 s from the first fire to the last, by the bridges' Ax-Fired-At (less 1s for
// the claim's latency, which may stretch the first fire's), where each replica taking the whole
// rate would take a third of that.
func TestBizRateThreeReplicas(t *testing.T) {
	t.Parallel()
	l := limitedBurst(t, `{"biz_type":"limited","rate":20,"burst":5}`, 100, 0)
	l.mu.Lock()
	defer l.mu.Unlock()
	span := slices.MaxFunc(l.firedAt, time.Time.Compare).Sub(slices.MinFunc(l.firedAt, time.Time.Compare))
	t.Logf("100 tasks at rate 20/s burst 5 on 3 replicas: fired over %v (%.1f/s)", span, 99/span.Seconds())
	if low := 95*time.Second/20 - time.Second; span < low {
		t.Errorf("100 fires took %v, want at least %v at rate 20/s", span, low)
	}
}

// The lateness alarm on three replicas: fires held back by a pause come out a second late, over
// the bizType's alarm_p99 of 100ms, and a subscriber of ax.alarm.late gets one firing event (the
// housekeeper speaks for all), then one resolved event once a window passed with no late fire,
// and nothing more.
func TestLatenessAlarmFiresAndResolvesOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := func(id string) bridge.Config { return bridge.Config{ReplicaID: id, AlarmWindow: 3 * time.Second} }
	e.startBridge(cfg("r1"))
	e.bizSet(`{"biz_type":"late","paused":true,"alarm_p99":"100ms"}`)
	e.startBridge(cfg("r2"))
	e.startBridge(cfg("r3"))
	alarms, err := e.nc.SubscribeSync(bridge.AlarmPrefix + ">")
	if err != nil {
		t.Fatal(err)
	}
	e.consume("ax.fire.late", func(m *nats.Msg) { _ = m.Ack() })
	for i := range 30 {
		e.schedule("late", "", bridge.HeaderTaskID, fmt.Sprintf("late-%d", i), bridge.HeaderDelay, "100ms")
	}
	<-time.After(1200 * time.Millisecond) // due 100ms in, resumed at 1.2s: a second late
	e.bizSet(`{"biz_type":"late","paused":false}`)
	type event struct {
		Alarm, BizType, State, P99, Threshold, Since, Replica string
		Samples                                               int64
	}
	next := func(within time.Duration) (event, bool) {
		m, err := alarms.NextMsg(within)
		if err != nil {
			return event{}, false
		}
		var ev event
		if err := json.Unmarshal(m.Data, &ev); err != nil || m.Subject != bridge.AlarmPrefix+"late" {
			t.Fatalf("alarm %s %q: %v", m.Subject, m.Data, err)
		}
		t.Logf("alarm on %s: %s", m.Subject, m.Data)
		return ev, true
	}
	firing, ok := next(10 * time.Second)
	if !ok || firing.State != "firing" || firing.Threshold != "100ms" || firing.Alarm != "lateness" || firing.Samples == 0 {
		t.Fatalf("first alarm: %+v (%v), want lateness firing over 100ms", firing, ok)
	}
	if p99, err := time.ParseDuration(firing.P99); err != nil || p99 < 500*time.Millisecond {
		t.Errorf("firing p99 %q, want about a second", firing.P99)
	}
	resolved, ok := next(15 * time.Second)
	if !ok || resolved.State != "resolved" || resolved.Replica != firing.Replica {
		t.Fatalf("second alarm: %+v (%v), want resolved by %s", resolved, ok, firing.Replica)
	}
	if ev, ok := next(4 * time.Second); ok {
		t.Errorf("an alarm after resolved: %+v", ev)
	}
}

// The overdue alarm: with max_in_flight 1 and the first fire held unacked, the bizType's other
// tasks wait past their due time; past --alarm-overdue (500ms here) ax.alarm.held1 says overdue
// firing, and once the fire is acked and the rest went out, resolved, each once.
func TestOverdueAlarmFiresAndResolves(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{AlarmWindow: 2 * time.Second, AlarmOverdue: 500 * time.Millisecond, AlarmP99: -1})
	e.bizSet(`{"biz_type":"held1","max_in_flight":1}`)
	alarms, err := e.nc.SubscribeSync(bridge.AlarmPrefix + "held1")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var first *nats.Msg
	e.consume("ax.fire.held1", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			first = m // held: the other tasks wait behind max_in_flight 1
			return
		}
		_ = m.Ack()
	})
	for i := range 5 {
		e.schedule("held1", "", bridge.HeaderTaskID, fmt.Sprintf("h-%d", i), bridge.HeaderDelay, "100ms")
	}
	next := func(within time.Duration) (map[string]any, bool) {
		m, err := alarms.NextMsg(within)
		if err != nil {
			return nil, false
		}
		var ev map[string]any
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Fatalf("alarm %q: %v", m.Data, err)
		}
		t.Logf("alarm: %s", m.Data)
		return ev, true
	}
	ev, ok := next(10 * time.Second)
	if !ok || ev["alarm"] != "overdue" || ev["state"] != "firing" || ev["threshold"] != "500ms" {
		t.Fatalf("first alarm %v (%v), want overdue firing", ev, ok)
	}
	if d, err := time.ParseDuration(ev["oldest"].(string)); err != nil || d <= 500*time.Millisecond {
		t.Errorf("oldest %v, want over the threshold", ev["oldest"])
	}
	mu.Lock()
	_ = first.Ack()
	mu.Unlock()
	for i := range 5 {
		e.waitStatus(fmt.Sprintf("h-%d", i), kvstore.StatusSuccess, 10*time.Second)
	}
	ev, ok = next(10 * time.Second)
	if !ok || ev["alarm"] != "overdue" || ev["state"] != "resolved" {
		t.Fatalf("second alarm %v (%v), want overdue resolved", ev, ok)
	}
	if ev, ok := next(3 * time.Second); ok {
		t.Errorf("an alarm after resolved: %v", ev)
	}
}
