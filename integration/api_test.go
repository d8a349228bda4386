package integration

import (
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/kvstore"
)

type apiTask struct {
	ID        string `json:"id"`
	Status    string `json:"status"`
	Attempt   int    `json:"attempt"`
	DueAt     string `json:"due_at"`
	Payload   string `json:"payload"`
	LastError string `json:"last_error"`
}

// apiCall makes a request as `nats req ax.api.task.<op> <id>` does and returns the decoded task,
// or the service's error code.
func (e *env) apiCall(subject, id string) (apiTask, string) {
	e.t.Helper()
	m, err := e.nc.Request(subject, []byte(id), 5*time.Second)
	if err != nil {
		e.t.Fatalf("%s %s: %v", subject, id, err)
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		e.t.Logf("%s %s: %s %s", subject, id, code, m.Header.Get("Nats-Service-Error"))
		return apiTask{}, code
	}
	var t apiTask
	if err := json.Unmarshal(m.Data, &t); err != nil {
		e.t.Fatalf("%s %s: %v in %q", subject, id, err, m.Data)
	}
	return t, ""
}

// The task API: read a task, cancel a waiting one (it never fires), requeue a dead one (it
// fires again from attempt 1); wrong ids and wrong states are clear errors.
func TestTaskAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{})
	var terminated atomic.Bool // the first fire of api-dead is terminated, later ones acked
	fires := e.consume("ax.fire.api", func(m *nats.Msg) {
		if m.Header.Get(bridge.HeaderTaskID) == "api-dead" && terminated.CompareAndSwap(false, true) {
			_ = m.Term()
			return
		}
		_ = m.Ack()
	})

	e.schedule("api", `{"n":1}`, bridge.HeaderTaskID, "api-wait", bridge.HeaderDelay, "1h")
	e.waitStatus("api-wait", kvstore.StatusWaiting, 5*time.Second)
	got, code := e.apiCall(bridge.APIGet, "api-wait")
	if code != "" || got.ID != "api-wait" || got.Status != "WAITING" || got.Payload != `{"n":1}` || got.DueAt == "" {
		t.Fatalf("get: %+v %s", got, code)
	}
	if got, code = e.apiCall(bridge.APICancel, "api-wait"); code != "" || got.Status != "CANCELLED" {
		t.Fatalf("cancel: %+v %s", got, code)
	}
	if _, code = e.apiCall(bridge.APICancel, "api-wait"); code != "409" {
		t.Errorf("cancel a cancelled task: code %q, want 409", code)
	}
	if _, code = e.apiCall(bridge.APIGet, "api-never"); code != "404" {
		t.Errorf("get a missing task: code %q, want 404", code)
	}
	if _, code = e.apiCall(bridge.APIGet, "not an id"); code != "400" {
		t.Errorf("get with a bad id: code %q, want 400", code)
	}

	e.schedule("api", "d", bridge.HeaderTaskID, "api-dead")
	f := fires.next(t, 5*time.Second)
	if f.msg.Header.Get(bridge.HeaderTaskID) != "api-dead" {
		t.Fatalf("fired %v", f.msg.Header)
	}
	e.waitStatus("api-dead", kvstore.StatusDead, 5*time.Second)
	if got, code = e.apiCall(bridge.APIRequeue, "api-dead"); code != "" || got.Status != "WAITING" || got.Attempt != 0 {
		t.Fatalf("requeue: %+v %s", got, code)
	}
	f = fires.next(t, 5*time.Second)
	if f.msg.Header.Get(bridge.HeaderTaskID) != "api-dead" || f.msg.Header.Get(bridge.HeaderAttempt) != "1" {
		t.Fatalf("after requeue fired %v", f.msg.Header)
	}
	e.waitStatus("api-dead", kvstore.StatusSuccess, 5*time.Second)
	fires.none(t, 300*time.Millisecond) // the cancelled task never fires
}
