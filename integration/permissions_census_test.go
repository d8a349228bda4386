package integration

import (
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/bridge/ui"
)

// checkOperatorCensus: as user operator, list, stats, replicas and a bulk job (whose audit
// event the operator hears) work across the replicas' census, which the bridge asks on
// ax.stats.census under its own role; the status page, on the bridge's connection, shows them.
func checkOperatorCensus(t *testing.T, op *roleConn, bridgeConn *nats.Conn) {
	t.Helper()
	audits, err := op.nc.SubscribeSync("ax.audit.order")
	if err != nil {
		t.Fatal(err)
	}
	req := func(subject, body string) string {
		t.Helper()
		m, err := op.nc.Request(subject, []byte(body), 5*time.Second)
		if err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
			t.Fatalf("operator %s %s: %v %s", subject, body, err, m.Header.Get("Nats-Service-Error"))
		}
		return string(m.Data)
	}
	if got := req(bridge.APIList, `{"biz_type":"order","status":["WAITING"]}`); !strings.Contains(got, `"order-2"`) {
		t.Errorf("operator list: %s", got)
	}
	if got := req(bridge.APIStats, ``); !strings.Contains(got, `"order":{"waiting":1`) {
		t.Errorf("operator stats: %s", got)
	}
	if got := req(bridge.APIReplicas, ``); !strings.Contains(got, `"id":"r1"`) {
		t.Errorf("operator replicas: %s", got)
	}
	var job struct{ Job, State string }
	if err := json.Unmarshal([]byte(req(bridge.APIBulk, `{"action":"reschedule","delay":"2h","filter":{"biz_type":"order","id_prefix":"order-2"},"dry_run":false,"by":"op"}`)), &job); err != nil || job.State != "running" {
		t.Fatalf("operator bulk: %+v %v", job, err)
	}
	if m, err := audits.NextMsg(5 * time.Second); err != nil || !strings.Contains(string(m.Data), job.Job) {
		t.Fatalf("operator hears the audit event: %v %v", m, err)
	}
	page := ui.New(bridgeConn, ui.Config{Prefix: bridge.DefaultPrefix})
	hs := httptest.NewServer(page.Handler())
	defer hs.Close()
	res, err := hs.Client().Get(hs.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || strings.Contains(string(body), `class="err"`) || !strings.Contains(string(body), `data-biz="order"`) {
		t.Errorf("status page on the bridge's connection: %d %s", res.StatusCode, body)
	}
}
