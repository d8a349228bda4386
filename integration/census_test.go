package integration

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/kvstore"
)

type listPage struct {
	Tasks []struct {
		ID        string `json:"id"`
		BizType   string `json:"biz_type"`
		Status    string `json:"status"`
		DueAt     string `json:"due_at"`
		Payload   string `json:"payload"`
		Truncated bool   `json:"payload_truncated"`
	} `json:"tasks"`
	NextCursor string `json:"next_cursor"`
	Total      int    `json:"total"`
}

type statsAnswer struct {
	BizTypes map[string]struct {
		Waiting, Running, Dead int
		Due                    struct {
			Overdue int `json:"overdue"`
			Minute  int `json:"within_1m"`
			Hour    int `json:"within_1h"`
			Later   int `json:"later"`
		} `json:"due"`
		Lateness *struct {
			P99   string `json:"p99"`
			Fires int64  `json:"fires"`
		} `json:"lateness"`
	} `json:"biz_types"`
	Replicas int `json:"replicas"`
}

// apiJSON requests subject with body and decodes the answer into out; it returns the service's
// error code, if any.
func (e *env) apiJSON(subject string, body any, out any) string {
	e.t.Helper()
	data, _ := json.Marshal(body)
	if s, ok := body.(string); ok {
		data = []byte(s)
	}
	m, err := e.nc.Request(subject, data, 10*time.Second)
	if err != nil {
		e.t.Fatalf("%s %s: %v", subject, data, err)
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		e.t.Logf("%s %s: %s %s", subject, data, code, m.Header.Get("Nats-Service-Error"))
		return code
	}
	if err := json.Unmarshal(m.Data, out); err != nil {
		e.t.Fatalf("%s: %v in %q", subject, err, m.Data)
	}
	return ""
}

// List, stats and replicas on two replicas: every task once, ordered by due time, filters and
// pages that add up, counts that match what was scheduled and follow a requeue, clear errors.
func TestListStatsReplicas(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{ReplicaID: "census-a", AlarmWindow: 30 * time.Second})
	e.startBridge(bridge.Config{ReplicaID: "census-b", AlarmWindow: 30 * time.Second})
	e.consume("ax.fire.pay", func(m *nats.Msg) { _ = m.Term() })
	// orders: 10 due within a minute, 10 within an hour, 10 later; reports: 5; pay: 4 DEAD.
	for i := range 30 {
		delay := []string{"40s", "30m", "48h"}[i/10]
		e.schedule("orders", fmt.Sprintf(`{"n":%d}`, i), bridge.HeaderTaskID, fmt.Sprintf("ord-%02d", i),
			bridge.HeaderDelay, fmt.Sprintf("%s%dms", delay, i))
	}
	for i := range 5 {
		e.schedule("reports", strings.Repeat("r", 1000), bridge.HeaderTaskID, fmt.Sprintf("rep-%d", i), bridge.HeaderDelay, "2h")
	}
	e.schedule("ticks", "t", bridge.HeaderTaskID, "tick-series", bridge.HeaderEvery, "1h")
	for i := range 4 {
		e.schedule("pay", "p", bridge.HeaderTaskID, fmt.Sprintf("pay-%d", i), bridge.HeaderMaxRetry, "0")
	}
	for i := range 4 {
		e.waitStatus(fmt.Sprintf("pay-%d", i), kvstore.StatusDead, 10*time.Second)
	}
	e.waitStatus("rep-4", kvstore.StatusWaiting, 10*time.Second)
	e.waitStatus("ord-29", kvstore.StatusWaiting, 10*time.Second)

	var all listPage
	if !checkFor(10*time.Second, func() bool { return e.apiJSON(bridge.APIList, "", &all) == "" && len(all.Tasks) == 40 }) {
		t.Fatalf("list of everything: %d tasks, want 40", len(all.Tasks))
	}
	if all.NextCursor != "" || all.Total != 40 {
		t.Errorf("list of everything: next_cursor %q, total %d; want none and 40", all.NextCursor, all.Total)
	}
	var series listPage
	if code := e.apiJSON(bridge.APIList, map[string]any{"series": true}, &series); code != "" || len(series.Tasks) != 1 || series.Tasks[0].ID != "tick-series" {
		t.Errorf("list of series: %+v (%s), want tick-series alone", series.Tasks, code)
	}
	if !slices.IsSortedFunc(all.Tasks, func(a, b struct {
		ID        string `json:"id"`
		BizType   string `json:"biz_type"`
		Status    string `json:"status"`
		DueAt     string `json:"due_at"`
		Payload   string `json:"payload"`
		Truncated bool   `json:"payload_truncated"`
	}) int {
		return strings.Compare(a.DueAt, b.DueAt)
	}) {
		t.Errorf("list not ordered by due time: %v", all.Tasks)
	}
	for _, x := range all.Tasks {
		if x.BizType == "reports" && (!x.Truncated || len(x.Payload) != 256) {
			t.Errorf("%s: payload of %d bytes, truncated %v; want a 256-byte preview", x.ID, len(x.Payload), x.Truncated)
		}
	}
	checkDeadList(t, e)
	checkPages(t, e)
	checkListErrors(t, e)
	checkStats(t, e)
	checkReplicas(t, e)

	// A requeue moves a DEAD task back: the counts follow.
	if _, code := e.apiCall(bridge.APIRequeue, "pay-0"); code != "" {
		t.Fatalf("requeue pay-0: %s", code)
	}
	var st statsAnswer
	if !checkFor(10*time.Second, func() bool {
		return e.apiJSON(bridge.APIStats, "", &st) == "" && st.BizTypes["pay"].Dead == 4 && st.BizTypes["pay"].Lateness != nil && st.BizTypes["pay"].Lateness.Fires >= 5
	}) {
		t.Errorf("stats after requeue (fired and DEAD again): %+v", st.BizTypes["pay"])
	}
}

func checkDeadList(t *testing.T, e *env) {
	var dead listPage
	if code := e.apiJSON(bridge.APIList, map[string]any{"biz_type": "pay", "status": []string{"DEAD"}}, &dead); code != "" || len(dead.Tasks) != 4 {
		t.Fatalf("list of DEAD pay tasks: %d (%s), want 4", len(dead.Tasks), code)
	}
	for _, x := range dead.Tasks {
		if x.Status != "DEAD" || x.BizType != "pay" {
			t.Errorf("DEAD list holds %+v", x)
		}
	}
	var pre listPage
	if code := e.apiJSON(bridge.APIList, map[string]any{"id_prefix": "ord-1"}, &pre); code != "" || len(pre.Tasks) != 10 {
		t.Errorf("id_prefix ord-1: %d tasks (%s), want 10", len(pre.Tasks), code)
	}
	later := time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)
	var far listPage
	if code := e.apiJSON(bridge.APIList, map[string]any{"due_after": later}, &far); code != "" || len(far.Tasks) != 10 {
		t.Errorf("due_after %s: %d tasks (%s), want 10", later, len(far.Tasks), code)
	}
}

// checkPages walks orders 7 at a time: the pages add up to all 30, in order, each once.
func checkPages(t *testing.T, e *env) {
	var ids []string
	cursor := ""
	for range 10 {
		var p listPage
		if code := e.apiJSON(bridge.APIList, map[string]any{"biz_type": "orders", "limit": 7, "cursor": cursor}, &p); code != "" {
			t.Fatalf("page after %q: %s", cursor, code)
		}
		for _, x := range p.Tasks {
			ids = append(ids, x.ID)
		}
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	want := make([]string, 30)
	for i := range want {
		want[i] = fmt.Sprintf("ord-%02d", i)
	}
	if !slices.Equal(ids, want) {
		t.Errorf("pages of 7: %v, want %v", ids, want)
	}
}

func checkListErrors(t *testing.T, e *env) {
	for _, body := range []string{`{"status":["SUCCESS"]}`, `{"limit":5000}`, `{"cursor":"nope"}`, `{"colour":"red"}`,
		`{"due_after":"tomorrow"}`, `{"biz_type":"a.b"}`, `not json`} {
		var p listPage
		if code := e.apiJSON(bridge.APIList, body, &p); code != "400" {
			t.Errorf("list %s: code %q, want 400", body, code)
		}
	}
}

func checkStats(t *testing.T, e *env) {
	var st statsAnswer
	// The lateness comes from every replica's reports, sent every window/12.
	checkFor(10*time.Second, func() bool {
		return e.apiJSON(bridge.APIStats, "", &st) == "" && st.BizTypes["pay"].Lateness != nil && st.BizTypes["pay"].Lateness.Fires == 4
	})
	o := st.BizTypes["orders"]
	if o.Waiting != 30 || o.Due.Minute != 10 || o.Due.Hour != 10 || o.Due.Later != 10 || o.Due.Overdue != 0 {
		t.Errorf("stats of orders: %+v; want 30 waiting: 10 within a minute, 10 within an hour, 10 later", o)
	}
	if r := st.BizTypes["reports"]; r.Waiting != 5 || r.Due.Later != 5 {
		t.Errorf("stats of reports: %+v; want 5 waiting, later", r)
	}
	if p := st.BizTypes["pay"]; p.Dead != 4 || p.Waiting != 0 || p.Lateness == nil || p.Lateness.Fires != 4 {
		t.Errorf("stats of pay: %+v; want 4 DEAD and the lateness of 4 fires", p)
	}
	if st.Replicas != 2 {
		t.Errorf("stats from %d replicas, want 2", st.Replicas)
	}
}

func checkReplicas(t *testing.T, e *env) {
	var rs struct {
		Replicas []struct {
			ID          string `json:"id"`
			Partitions  []int  `json:"partitions"`
			Housekeeper bool   `json:"housekeeper"`
			Indexed     int    `json:"indexed"`
		} `json:"replicas"`
	}
	if code := e.apiJSON(bridge.APIReplicas, "", &rs); code != "" || len(rs.Replicas) != 2 {
		t.Fatalf("replicas: %+v (%s), want 2", rs, code)
	}
	parts, house, indexed := 0, 0, 0
	for _, r := range rs.Replicas {
		parts += len(r.Partitions)
		indexed += r.Indexed
		if r.Housekeeper {
			house++
		}
	}
	if rs.Replicas[0].ID != "census-a" || rs.Replicas[1].ID != "census-b" || parts != kvstore.DefaultPartitions || house != 1 || indexed != 36 {
		t.Errorf("replicas: %+v; want census-a and census-b, %d partitions, one housekeeper, 36 indexed", rs, kvstore.DefaultPartitions)
	}
}
