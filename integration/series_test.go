package integration

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/kvstore"
)

// occurrenceFire is one fire of a series as its consumer saw it.
type occurrenceFire struct {
	run, attempt int
	tick, due    time.Time
	at           time.Time
}

// seriesLog acks (or holds, when hold says so) the fires of a series and keeps them in order.
type seriesLog struct {
	mu    sync.Mutex
	fires []occurrenceFire
	held  []*nats.Msg
}

func (e *env) consumeSeries(subject string, hold func(run int) bool) *seriesLog {
	l := &seriesLog{}
	e.consume(subject, func(m *nats.Msg) {
		tick, err := time.Parse(time.RFC3339Nano, m.Header.Get(bridge.HeaderOccurrence))
		if err != nil {
			e.t.Errorf("fire without %s: %v", bridge.HeaderOccurrence, m.Header)
		}
		run, _ := strconv.Atoi(m.Header.Get(bridge.HeaderRun))
		attempt, _ := strconv.Atoi(m.Header.Get(bridge.HeaderAttempt))
		f := occurrenceFire{run: run, attempt: attempt, tick: tick, due: dueAt(e.t.(*testing.T), m), at: time.Now()}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.fires = append(l.fires, f)
		if hold != nil && hold(run) {
			l.held = append(l.held, m)
			return
		}
		_ = m.Ack()
	})
	return l
}

func (l *seriesLog) snapshot() []occurrenceFire {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.fires)
}

func (l *seriesLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.fires)
}

// seriesGet is what ax.api.task.get shows of a series.
type seriesGet struct {
	Status string `json:"status"`
	Series struct {
		Every     string `json:"every"`
		Misfire   string `json:"misfire"`
		Overlap   string `json:"overlap"`
		Tick      string `json:"tick"`
		NextTick  string `json:"next_tick"`
		Run       int    `json:"run"`
		Missed    int64  `json:"missed"`
		Coalesced int64  `json:"coalesced"`
		Skipped   int64  `json:"skipped"`
		Ending    bool   `json:"ending"`
	} `json:"series"`
}

func (e *env) getSeries(id string) seriesGet {
	e.t.Helper()
	m, err := e.nc.Request(bridge.APIGet, []byte(id), 5*time.Second)
	if err != nil {
		e.t.Fatalf("get %s: %v", id, err)
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		e.t.Fatalf("get %s: %s %s", id, code, m.Header.Get("Nats-Service-Error"))
	}
	var g seriesGet
	if err := json.Unmarshal(m.Data, &g); err != nil {
		e.t.Fatalf("get %s: %v in %q", id, err, m.Data)
	}
	e.t.Logf("get %s: %s", id, m.Data)
	return g
}

// An Ax-Every: 1s series of 8 runs on the wire: each tick fires once, in order, never before its
// due time, one interval apart; the record ends SUCCESS at run 8, and get shows the series.
func TestSeriesEveryFiresEachTick(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{})
	testSeriesEvery(t, e)
}

// The same with three replicas on one bucket: still one fire per tick.
func TestSeriesThreeReplicas(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, id := range []string{"r1", "r2", "r3"} {
		e.startBridge(bridge.Config{ReplicaID: id})
	}
	testSeriesEvery(t, e)
}

func testSeriesEvery(t *testing.T, e *env) {
	log := e.consumeSeries("ax.fire.ticks", nil)
	e.schedule("ticks", "tick", bridge.HeaderTaskID, "every-1s", bridge.HeaderEvery, "1s",
		bridge.HeaderDelay, "1s", bridge.HeaderMaxRuns, "8")
	e.waitStatus("every-1s", kvstore.StatusWaiting, 5*time.Second)
	g := e.getSeries("every-1s")
	if g.Status != "WAITING" || g.Series.Every != "1s" || g.Series.Run != 1 || g.Series.NextTick == "" ||
		g.Series.Misfire != "fire-once" || g.Series.Overlap != "skip" {
		t.Fatalf("get before the first tick: %+v", g)
	}
	e.waitStatus("every-1s", kvstore.StatusSuccess, 20*time.Second)
	fires := log.snapshot()
	if len(fires) != 8 {
		t.Fatalf("%d fires, want 8: %+v", len(fires), fires)
	}
	var late []time.Duration
	for i, f := range fires {
		if f.run != i+1 || f.attempt != 1 {
			t.Errorf("fire %d: run %d attempt %d", i, f.run, f.attempt)
		}
		if i > 0 && f.tick.Sub(fires[i-1].tick) != time.Second {
			t.Errorf("fire %d: tick %s, %v after the one before", i, f.tick, f.tick.Sub(fires[i-1].tick))
		}
		if !f.due.Equal(f.tick) || f.at.Before(f.due) {
			t.Errorf("fire %d: due %s, tick %s, received at %s (early)", i, f.due, f.tick, f.at)
		}
		late = append(late, f.at.Sub(f.due))
	}
	t.Logf("lateness of 8 ticks: %s", durSpread(late))
	if g := e.getSeries("every-1s"); g.Series.Run != 8 || g.Series.Skipped != 0 || g.Series.Missed != 0 {
		t.Errorf("get after the end: %+v", g)
	}
}

// Overlap skip: a tick that comes while the occurrence before it is unacked does not fire; the
// series goes on with the first tick after the ack. Cancel while an occurrence runs ends the
// series when it settles; the consumer's ack still counts and nothing fires after it.
func TestSeriesOverlapAndCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{})
	log := e.consumeSeries("ax.fire.slow", func(run int) bool { return run == 1 || run == 3 })
	e.schedule("slow", "", bridge.HeaderTaskID, "slow-1s", bridge.HeaderEvery, "1s", bridge.HeaderDelay, "500ms")
	if !checkFor(5*time.Second, func() bool { return log.count() == 1 }) {
		t.Fatal("run 1 did not fire")
	}
	// Hold run 1 for 2.5 ticks, then ack it.
	<-time.After(2500 * time.Millisecond)
	log.mu.Lock()
	acked := time.Now()
	_ = log.held[0].AckSync()
	log.mu.Unlock()
	if !checkFor(5*time.Second, func() bool { return log.count() == 3 }) {
		t.Fatalf("runs 2 and 3 did not fire: %+v", log.snapshot())
	}
	fires := log.snapshot()
	if !fires[1].tick.After(acked) || fires[1].run != 2 {
		t.Errorf("run 2's tick %s is not after the ack of run 1 at %s", fires[1].tick, acked)
	}
	if g := e.getSeries("slow-1s"); g.Series.Skipped < 2 {
		t.Errorf("skipped %d ticks, want at least 2", g.Series.Skipped)
	}
	// Run 3 is held: cancel marks the series to end, its ack ends it.
	m, err := e.nc.Request(bridge.APICancel, []byte("slow-1s"), 5*time.Second)
	if err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
		t.Fatalf("cancel while running: %v %v", err, m.Header)
	}
	if g := e.getSeries("slow-1s"); g.Status != "RUNNING" || !g.Series.Ending {
		t.Fatalf("after cancel: %+v", g)
	}
	log.mu.Lock()
	_ = log.held[1].AckSync()
	log.mu.Unlock()
	e.waitStatus("slow-1s", kvstore.StatusCancelled, 5*time.Second)
	<-time.After(1500 * time.Millisecond) // a tick and a half: none may fire
	if n := log.count(); n != 3 {
		t.Errorf("%d fires after the cancelled series settled, want none: %+v", n-3, log.snapshot()[3:])
	}
}

// Cancel of a waiting series: nothing fires after it.
func TestSeriesCancelWaiting(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{})
	log := e.consumeSeries("ax.fire.stop", nil)
	e.schedule("stop", "", bridge.HeaderTaskID, "stop-1s", bridge.HeaderEvery, "1s", bridge.HeaderDelay, "200ms")
	if !checkFor(5*time.Second, func() bool { return log.count() == 2 }) {
		t.Fatal("two runs did not fire")
	}
	e.waitStatus("stop-1s", kvstore.StatusWaiting, 2*time.Second)
	if got, code := e.apiCall(bridge.APICancel, "stop-1s"); code != "" || got.Status != "CANCELLED" {
		t.Fatalf("cancel: %+v %s", got, code)
	}
	n := log.count()
	<-time.After(2 * time.Second)
	if log.count() != n {
		t.Errorf("%d fires after cancel", log.count()-n)
	}
}

// A cron series in a time zone is stored with its first tick from the spec; the same message again
// is a duplicate, another spec for the id a conflict.
func TestSeriesCronStored(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{})
	rejected := e.consume("ax.rejected.>", nil)
	dups := e.consume("ax.duplicate.>", nil)
	e.schedule("reports", "", bridge.HeaderTaskID, "report-daily", bridge.HeaderCron, "0 0 9 * * *",
		bridge.HeaderTimeZone, "Europe/Berlin")
	got := e.waitStatus("report-daily", kvstore.StatusWaiting, 5*time.Second)
	tick := time.UnixMilli(got.Task.Series.Tick).In(mustZone(t, "Europe/Berlin"))
	if tick.Hour() != 9 || tick.Minute() != 0 || !tick.After(time.Now()) || tick.After(time.Now().Add(25*time.Hour)) {
		t.Errorf("first tick %s", tick)
	}
	e.schedule("reports", "", bridge.HeaderTaskID, "report-daily", bridge.HeaderCron, "0 0 9 * * *",
		bridge.HeaderTimeZone, "Europe/Berlin")
	if d := dups.next(t, 5*time.Second); d.msg.Header.Get(bridge.HeaderTaskID) != "report-daily" {
		t.Errorf("duplicate event for %v", d.msg.Header)
	}
	e.schedule("reports", "", bridge.HeaderTaskID, "report-daily", bridge.HeaderCron, "0 0 10 * * *",
		bridge.HeaderTimeZone, "Europe/Berlin")
	if r := rejected.next(t, 5*time.Second); r.msg.Header.Get(bridge.HeaderErrorCode) != bridge.CodeDuplicateConflict {
		t.Errorf("another spec: %v", r.msg.Header)
	}
	if e2, _ := e.store.Get(context.Background(), "report-daily"); e2.Task.Series.Cron != "0 0 9 * * *" {
		t.Errorf("the stored spec changed: %q", e2.Task.Series.Cron)
	}
	if w := e.getSeriesView("report-daily")["dst_warning"]; w != nil {
		t.Errorf("09:00 in Europe/Berlin has a DST warning: %v", w)
	}
	// Ax-Replace: true replaces the waiting series with the new spec; 02:30 in Europe/Berlin
	// falls in next March's spring-forward gap, and get says so.
	e.schedule("reports", "", bridge.HeaderTaskID, "report-daily", bridge.HeaderCron, "0 30 2 * * *",
		bridge.HeaderTimeZone, "Europe/Berlin", bridge.HeaderReplace, "true")
	if !checkFor(5*time.Second, func() bool {
		e2, err := e.store.Get(context.Background(), "report-daily")
		return err == nil && e2.Task.Series.Cron == "0 30 2 * * *" && e2.Task.Status == kvstore.StatusWaiting
	}) {
		t.Fatal("Ax-Replace: true did not replace the series")
	}
	if w, _ := e.getSeriesView("report-daily")["dst_warning"].(string); !strings.Contains(w, "02:30:00") || !strings.Contains(w, "does not exist") {
		t.Errorf("dst_warning %q, want 02:30 in a spring-forward gap", w)
	}
	rejected.none(t, 200*time.Millisecond)
}

// getSeriesView is the series object of ax.api.task.get, as JSON values.
func (e *env) getSeriesView(id string) map[string]any {
	e.t.Helper()
	m, err := e.nc.Request(bridge.APIGet, []byte(id), 5*time.Second)
	if err != nil {
		e.t.Fatalf("get %s: %v", id, err)
	}
	var v struct {
		Series map[string]any `json:"series"`
	}
	if err := json.Unmarshal(m.Data, &v); err != nil {
		e.t.Fatalf("get %s: %v in %q", id, err, m.Data)
	}
	return v.Series
}

func mustZone(t *testing.T, name string) *time.Location {
	l, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// ax.api.task.reschedule moves a waiting task (it fires at the new time, not the old) and a
// series' next tick (the grid follows it); bad bodies are 400, a finished task 409.
func TestReschedule(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{})
	fires := e.consume("ax.fire.move", func(m *nats.Msg) { _ = m.Ack() })
	req := func(body string) (*nats.Msg, string) {
		m, err := e.nc.Request(bridge.APIReschedule, []byte(body), 5*time.Second)
		if err != nil {
			t.Fatalf("reschedule %s: %v", body, err)
		}
		return m, m.Header.Get("Nats-Service-Error-Code")
	}
	e.schedule("move", "", bridge.HeaderTaskID, "move-1", bridge.HeaderDelay, "1h")
	e.waitStatus("move-1", kvstore.StatusWaiting, 5*time.Second)
	asked := time.Now()
	if _, code := req(`{"id":"move-1","delay":"300ms"}`); code != "" {
		t.Fatalf("reschedule: code %s", code)
	}
	f := fires.next(t, 5*time.Second)
	if due := dueAt(t, f.msg); due.Before(asked.Add(300*time.Millisecond-time.Millisecond)) || f.at.Before(due) {
		t.Errorf("fired at %s for due %s, asked at %s", f.at, due, asked)
	}
	e.waitStatus("move-1", kvstore.StatusSuccess, 5*time.Second)
	if _, code := req(`{"id":"move-1","delay":"1s"}`); code != "409" {
		t.Errorf("reschedule a finished task: code %q, want 409", code)
	}
	for _, bad := range []string{`move-1`, `{"id":"move-1"}`, `{"id":"move-1","delay":"1s","due_at":"0"}`,
		`{"id":"bad id","delay":"1s"}`, `{"id":"move-1","delay":"-1s"}`, `{"id":"move-1","due_at":"soon"}`} {
		if _, code := req(bad); code != "400" {
			t.Errorf("reschedule %s: code %q, want 400", bad, code)
		}
	}
	if _, code := req(`{"id":"move-none","delay":"1s"}`); code != "404" {
		t.Errorf("reschedule a missing task: code %q, want 404", code)
	}
	// A series' next tick, and the ticks after it, move.
	e.schedule("move", "", bridge.HeaderTaskID, "move-series", bridge.HeaderEvery, "1h")
	e.waitStatus("move-series", kvstore.StatusWaiting, 5*time.Second)
	at := time.Now().Add(2 * time.Hour).Truncate(time.Second)
	if _, code := req(`{"id":"move-series","due_at":"` + at.UTC().Format(time.RFC3339) + `"}`); code != "" {
		t.Fatalf("reschedule the series: code %s", code)
	}
	got := e.waitStatus("move-series", kvstore.StatusWaiting, time.Second)
	if s := got.Task.Series; s.Tick != at.UnixMilli() || s.Next != at.Add(time.Hour).UnixMilli() || got.Task.DueAt != at.UnixMilli() {
		t.Errorf("series after reschedule: tick %d next %d due %d, want %d", s.Tick, s.Next, got.Task.DueAt, at.UnixMilli())
	}
}
