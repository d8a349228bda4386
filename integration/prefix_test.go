package integration

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/kvstore"
)

// deployment is one bridge deployment on the shared server: its prefix, its bucket and a client
// connection of its own (publishing schedules, calling its task API).
type deployment struct {
	*env
	prefix string
}

func (d *deployment) scheduleMsg(biz, payload string, kv ...string) {
	d.t.Helper()
	m := nats.NewMsg(d.prefix + ".schedule." + biz)
	m.Data = []byte(payload)
	for i := 0; i+1 < len(kv); i += 2 {
		m.Header.Add(kv[i], kv[i+1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := d.js.PublishMsg(ctx, m); err != nil {
		d.t.Fatalf("schedule on %s: %v", m.Subject, err)
	}
}

// Two deployments with prefixes ax and b2 share one server and one account: with the same
// bizType and the same task id, each fires only on its own fire subject, an ack settles only its
// own deployment's record, rejections, duplicates and dead events go to its own subjects, each
// has its own stream, consumer, bucket and members bucket, and neither's task API sees the
// other's tasks.
func TestTwoPrefixesShareAnAccount(t *testing.T) {
	t.Parallel()
	ax := &deployment{env: newEnv(t), prefix: "ax"}
	url := ax.srv.ClientURL()
	b2 := &deployment{env: newEnvOn(t, url, kvstore.Config{Bucket: "B2_TASKS"}), prefix: "b2"}
	ax.startBridge(bridge.Config{ReplicaID: "r-ax"})
	ax.startBridgeOn(url, kvstore.Config{Bucket: "B2_TASKS"}, bridge.Config{Prefix: "b2", ReplicaID: "r-b2"})

	axFires := ax.consume("ax.fire.orders", nil)
	b2Fires := ax.consume("b2.fire.orders", nil)
	ax.scheduleMsg("orders", "from-ax", bridge.HeaderTaskID, "shared", bridge.HeaderAckWait, "1m")
	b2.scheduleMsg("orders", "from-b2", bridge.HeaderTaskID, "shared", bridge.HeaderAckWait, "1m")
	fa, fb := axFires.next(t, 10*time.Second).msg, b2Fires.next(t, 10*time.Second).msg
	if string(fa.Data) != "from-ax" || !strings.HasPrefix(fa.Reply, "ax.ack.orders.") || fa.Header.Get(bridge.HeaderReplica) != "r-ax" {
		t.Errorf("ax.fire.orders: %q reply %q replica %q", fa.Data, fa.Reply, fa.Header.Get(bridge.HeaderReplica))
	}
	if string(fb.Data) != "from-b2" || !strings.HasPrefix(fb.Reply, "b2.ack.orders.") || fb.Header.Get(bridge.HeaderReplica) != "r-b2" {
		t.Errorf("b2.fire.orders: %q reply %q replica %q", fb.Data, fb.Reply, fb.Header.Get(bridge.HeaderReplica))
	}
	axFires.none(t, 100*time.Millisecond) // one fire each, on its own subject
	b2Fires.none(t, 0)

	// The b2 ack settles the b2 record; the ax record of the same id stays RUNNING until its own ack.
	if err := fb.Respond(nil); err != nil {
		t.Fatal(err)
	}
	b2.waitStatus("shared", kvstore.StatusSuccess, 10*time.Second)
	if e, err := ax.store.Get(context.Background(), "shared"); err != nil || e.Task.Status != kvstore.StatusRunning || string(e.Task.Payload) != "from-ax" {
		t.Fatalf("ax record after the b2 ack: %+v %v, want RUNNING from-ax", e.Task, err)
	}
	if err := fa.Respond(nil); err != nil {
		t.Fatal(err)
	}
	ax.waitStatus("shared", kvstore.StatusSuccess, 10*time.Second)

	// Rejections, duplicates and dead events are published under the deployment's prefix.
	events := ax.consume("*.rejected.>", nil)
	dups := ax.consume("*.duplicate.>", nil)
	dead := ax.consume("*.dead.>", nil)
	b2.scheduleMsg("orders", "x", bridge.HeaderDelay, "soon")
	if m := events.next(t, 10*time.Second).msg; m.Subject != "b2.rejected.orders" || m.Header.Get(bridge.HeaderErrorCode) != bridge.CodeBadDelay {
		t.Errorf("rejection on %s %v, want b2.rejected.orders %s", m.Subject, m.Header, bridge.CodeBadDelay)
	}
	ax.scheduleMsg("orders", "from-ax", bridge.HeaderTaskID, "shared", bridge.HeaderAckWait, "1m") // the same task again
	if m := dups.next(t, 10*time.Second).msg; m.Subject != "ax.duplicate.orders" {
		t.Errorf("duplicate on %s, want ax.duplicate.orders", m.Subject)
	}
	b2Term := ax.consume("b2.fire.terms", func(m *nats.Msg) { _ = m.Term() })
	b2.scheduleMsg("terms", "t", bridge.HeaderTaskID, "term-1")
	b2Term.next(t, 10*time.Second)
	if m := dead.next(t, 10*time.Second).msg; m.Subject != "b2.dead.terms" || m.Header.Get(bridge.HeaderTaskID) != "term-1" {
		t.Errorf("dead event on %s %v, want b2.dead.terms term-1", m.Subject, m.Header)
	}
	events.none(t, 100*time.Millisecond)
	dups.none(t, 0)
	dead.none(t, 0)

	// The task API of one deployment does not see the other's tasks.
	b2.scheduleMsg("orders", "later", bridge.HeaderTaskID, "only-b2", bridge.HeaderDelay, "1h")
	b2.waitStatus("only-b2", kvstore.StatusWaiting, 10*time.Second)
	if _, code := ax.apiCall(bridge.APIGet, "only-b2"); code != "404" {
		t.Errorf("ax.api.task.get only-b2: code %q, want 404", code)
	}
	if _, code := ax.apiCall(bridge.APICancel, "only-b2"); code != "404" {
		t.Errorf("ax.api.task.cancel only-b2: code %q, want 404", code)
	}
	if got, code := b2.apiCall("b2.api.task.get", "only-b2"); code != "" || got.Status != "WAITING" || got.Payload != "later" {
		t.Errorf("b2.api.task.get only-b2: %+v %s", got, code)
	}
	if got, code := b2.apiCall("b2.api.task.get", "shared"); code != "" || got.Payload != "from-b2" {
		t.Errorf("b2.api.task.get shared: %+v %s", got, code)
	}
	if got, code := ax.apiCall(bridge.APIGet, "shared"); code != "" || got.Payload != "from-ax" {
		t.Errorf("ax.api.task.get shared: %+v %s", got, code)
	}
	for svc, want := range map[string]string{"axbridge": "ax.api.", "b2bridge": "b2.api."} {
		m, err := ax.nc.Request("$SRV.INFO."+svc, nil, 5*time.Second)
		if err != nil {
			t.Fatalf("service %s: %v", svc, err)
		}
		var info struct {
			Endpoints []struct {
				Subject string `json:"subject"`
			} `json:"endpoints"`
		}
		if err := json.Unmarshal(m.Data, &info); err != nil || len(info.Endpoints) != 11 { // task get, cancel, requeue, reschedule, list, stats, replicas, bulk; biz set, get, list
			t.Fatalf("service %s info %s (err %v)", svc, m.Data, err)
		}
		for _, ep := range info.Endpoints {
			if !strings.HasPrefix(ep.Subject, want) {
				t.Errorf("service %s serves %s, want %s*", svc, ep.Subject, want)
			}
		}
	}

	// Each has its own stream (capturing only its prefix), consumer, bucket and members bucket.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, n := range []struct{ stream, subject, consumer, members, replica string }{
		{"AX_SCHEDULE", "ax.schedule.>", "axbridge", "AX_TASKS_MEMBERS", "r-ax"},
		{"B2_SCHEDULE", "b2.schedule.>", "b2bridge", "B2_TASKS_MEMBERS", "r-b2"},
	} {
		s, err := ax.js.Stream(ctx, n.stream)
		if err != nil {
			t.Fatalf("stream %s: %v", n.stream, err)
		}
		if subj := s.CachedInfo().Config.Subjects; !slices.Equal(subj, []string{n.subject}) {
			t.Errorf("stream %s captures %q, want %s", n.stream, subj, n.subject)
		}
		if _, err := ax.js.Consumer(ctx, n.stream, n.consumer); err != nil {
			t.Errorf("consumer %s on %s: %v", n.consumer, n.stream, err)
		}
		kv, err := ax.js.KeyValue(ctx, n.members)
		if err != nil {
			t.Fatalf("members bucket %s: %v", n.members, err)
		}
		keys, err := kv.Keys(ctx)
		var members []string
		for _, k := range keys {
			if strings.HasPrefix(k, "m.") { // a replica's heartbeat (the other key is the housekeeper's)
				members = append(members, k)
			}
		}
		if err != nil || !slices.Equal(members, []string{"m." + n.replica}) {
			t.Errorf("members bucket %s holds %q (err %v), want the one replica %s", n.members, keys, err, n.replica)
		}
	}
	if ax.store.Bucket() != "AX_TASKS" || b2.store.Bucket() != "B2_TASKS" {
		t.Errorf("buckets %s and %s", ax.store.Bucket(), b2.store.Bucket())
	}
}
