package integration

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// On a server with a small max_payload, with caller headers that make the metadata line 5 KB
// (so the record's message repeats it as its Ax-Record header), schedules with payload sizes swept
// across the limit are each either refused with PAYLOAD_TOO_LARGE or stored, and every stored one
// goes through every later state, the largest included: fired, nakked, fired again, terminated with
// a 1 KiB reason of control bytes (escaped six times over in the record), requeued, fired with that
// reason kept, and acked (review N3: some were stored and never claimed).
func TestSizeLimitCountsEveryLaterWrite(t *testing.T) {
	t.Parallel()
	const maxPayload = 64 << 10
	srv := natstest.RunServer(t, natstest.WithMaxPayload(maxPayload))
	e := newEnvOn(t, srv.ClientURL(), kvstore.Config{})
	e.srv = srv
	e.startBridge(bridge.Config{})
	reason := strings.Repeat("\x01", 1024)
	var mu sync.Mutex
	fired := map[string]int{} // fires by task id
	e.consume("ax.fire.big", func(m *nats.Msg) {
		mu.Lock()
		fired[m.Header.Get(bridge.HeaderTaskID)]++
		n := fired[m.Header.Get(bridge.HeaderTaskID)]
		mu.Unlock()
		switch n {
		case 1:
			_ = m.Respond([]byte("-NAK"))
		case 2:
			_ = m.Respond([]byte("+TERM " + reason))
		default:
			_ = m.Respond([]byte("+ACK"))
		}
	})
	rejected := e.consume("ax.rejected.big", nil)
	dead := e.consume("ax.dead.big", func(m *nats.Msg) {
		_, _ = e.nc.Request("ax.api.task.requeue", []byte(m.Header.Get(bridge.HeaderTaskID)), 5*time.Second)
	})
	meta := strings.Repeat("m", 5000)
	const step = 32
	var ids []string
	for p := maxPayload - 22<<10; p <= maxPayload-8<<10; p += step {
		id := fmt.Sprintf("big-%d", p)
		ids = append(ids, id)
		e.schedule("big", strings.Repeat("p", p), bridge.HeaderTaskID, id, "Meta", meta, bridge.HeaderBackoff, "0")
	}
	refused := map[string]bool{}
	for range ids {
		// One outcome per schedule: a rejection, or the second fire's term (a dead event).
		select {
		case f := <-rejected.ch:
			id := f.msg.Header.Get(bridge.HeaderTaskID)
			if code := f.msg.Header.Get(bridge.HeaderErrorCode); code != bridge.CodePayloadTooLarge {
				t.Errorf("task %s refused with %s (%s), want %s", id, code, f.msg.Header.Get(bridge.HeaderError), bridge.CodePayloadTooLarge)
			}
			refused[id] = true
		case f := <-dead.ch:
			if got := f.msg.Header.Get(bridge.HeaderError); got != reason {
				t.Errorf("task %s dead with %q, want the consumer's reason", f.msg.Header.Get(bridge.HeaderTaskID), got)
			}
		case <-time.After(30 * time.Second):
			mu.Lock()
			t.Fatalf("%d of %d schedules neither refused nor fired and terminated (fires: %v)", len(ids)-len(refused)-len(fired), len(ids), len(fired))
			mu.Unlock()
		}
	}
	if len(refused) == 0 || len(refused) == len(ids) {
		t.Fatalf("%d of %d refused: the sweep does not cross the limit", len(refused), len(ids))
	}
	for _, id := range ids {
		if refused[id] {
			e.mustNotExist(id)
			continue
		}
		en := e.waitStatus(id, kvstore.StatusSuccess, 20*time.Second)
		if en.Task.LastError != reason {
			t.Errorf("task %s: last error %q, want the term's reason kept", id, en.Task.LastError)
		}
	}
	t.Logf("%d of %d refused", len(refused), len(ids))
}
