package bridge_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/faultstore"
	"github.com/axbridge/axbridge/kvstore"
)

// deadEvents subscribes to ax.dead.<biz> and queues what arrives.
func (fe *faultEnv) deadEvents(biz string) chan *nats.Msg {
	fe.t.Helper()
	return fe.subscribe(bridge.DeadPrefix + biz)
}

// checkRefusedDead checks that id is DEAD with a STORE_REFUSED reason, and that its dead event
// says so.
func (fe *faultEnv) checkRefusedDead(id string, ev *nats.Msg) {
	fe.t.Helper()
	if got := ev.Header.Get(bridge.HeaderTaskID); got != id {
		fe.t.Fatalf("dead event of %q, want %q", got, id)
	}
	if reason := ev.Header.Get(bridge.HeaderError); !strings.HasPrefix(reason, bridge.CodeStoreRefused+": ") {
		fe.t.Errorf("dead event reason %q, want it to start with %s", reason, bridge.CodeStoreRefused)
	}
	e, err := fe.mem.Get(context.Background(), id)
	if err != nil || e.Task.Status != kvstore.StatusDead || !strings.HasPrefix(e.Task.LastError, bridge.CodeStoreRefused) {
		fe.t.Errorf("record %s %q (err %v), want DEAD with the reason", e.Task.Status, e.Task.LastError, err)
	}
}

// A claim the store refuses for good (the record's message over the server's max payload) ends
// the task DEAD with STORE_REFUSED and a dead event, instead of a claim sent again every second
// for ever (review N3). It is never fired.
func TestClaimRefusedForGoodEndsTask(t *testing.T) {
	t.Parallel()
	fe := newFaultEnv(t)
	fires := fe.fires("refused")
	dead := fe.deadEvents("refused")
	fe.store.Inject(faultstore.Rule{Op: faultstore.OpUpdate, ID: "a", Mode: faultstore.FailBefore, Times: 1, Err: nats.ErrMaxPayload})
	fe.due("a", "refused")
	select {
	case ev := <-dead:
		fe.checkRefusedDead("a", ev)
	case m := <-fires:
		t.Fatalf("fired attempt %s after the store refused its claim for good", m.Header.Get(bridge.HeaderAttempt))
	case <-time.After(10 * time.Second):
		t.Fatal("no dead event")
	}
	if len(fires) > 0 {
		t.Error("fired after the claim was refused")
	}
}

// An ack whose write the store refuses for good ends the task DEAD with STORE_REFUSED, instead of
// a write retried until the attempt ends.
func TestAckRefusedForGoodEndsTask(t *testing.T) {
	t.Parallel()
	fe := newFaultEnv(t)
	fires := fe.fires("refused")
	dead := fe.deadEvents("refused")
	fe.due("b", "refused")
	m := next(t, fires)
	// The pipelined write and the write after reading the record back.
	fe.store.Inject(faultstore.Rule{Op: faultstore.OpUpdate, ID: "b", Mode: faultstore.FailBefore, Times: 2, Err: nats.ErrMaxPayload})
	if err := m.Respond([]byte("+ACK")); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-dead:
		fe.checkRefusedDead("b", ev)
	case <-time.After(10 * time.Second):
		e, err := fe.mem.Get(context.Background(), "b")
		t.Fatalf("no dead event; record %s (err %v)", e.Task.Status, err)
	}
}
