package main

import (
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/natstest"
)

// --prefix (or AX_PREFIX) names the subjects, and the defaults of --bucket, --stream and
// --consumer derive from it; names given explicitly win; a prefix that is not one token is refused.
func TestPrefixFlags(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.prefix != "ax" || o.bucket != "AX_TASKS" || o.stream != "AX_SCHEDULE" || o.consumer != "axbridge" {
		t.Errorf("defaults: prefix %q bucket %q stream %q consumer %q", o.prefix, o.bucket, o.stream, o.consumer)
	}
	if o, err = parseFlags([]string{"--prefix", "p"}, io.Discard); err != nil || o.bucket != "P_TASKS" || o.stream != "P_SCHEDULE" || o.consumer != "pbridge" {
		t.Errorf("--prefix p: bucket %q stream %q consumer %q (err %v)", o.bucket, o.stream, o.consumer, err)
	}
	t.Setenv("AX_PREFIX", "team-b")
	if o, err = parseFlags([]string{"--stream", "MINE"}, io.Discard); err != nil || o.prefix != "team-b" || o.bucket != "TEAM-B_TASKS" || o.stream != "MINE" || o.consumer != "team-bbridge" {
		t.Errorf("AX_PREFIX=team-b --stream MINE: prefix %q bucket %q stream %q consumer %q (err %v)", o.prefix, o.bucket, o.stream, o.consumer, err)
	}
	for _, bad := range []string{"a.b", "", "a>"} {
		if _, err := parseFlags([]string{"--prefix", bad}, io.Discard); err == nil || !strings.Contains(err.Error(), "--prefix") {
			t.Errorf("--prefix %q: err %v, want one naming --prefix", bad, err)
		}
	}
}

// The binary run with --prefix b2 creates and uses the derived names (stream B2_SCHEDULE on
// b2.schedule.>, consumer b2bridge, buckets B2_TASKS, B2_TASKS_MEMBERS and B2_TASKS_BIZ), fires on
// b2.fire.*, serves the task API on b2.api.task.* and the settings API on b2.api.biz.* as the
// micro service b2bridge, and creates none of the
// default prefix's names.
func TestBinaryPrefix(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	logs := runBridge(t, "--nats-url", srv.ClientURL(), "--prefix", "b2")
	if !strings.Contains(logs.String(), "nats pub b2.schedule.<bizType>") {
		t.Errorf("ready log does not name b2.schedule:\n%s", logs)
	}
	nc := natstest.Connect(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	stream, err := js.Stream(ctx, "B2_SCHEDULE")
	if err != nil {
		t.Fatal(err)
	}
	if subj := stream.CachedInfo().Config.Subjects; !slices.Equal(subj, []string{"b2.schedule.>"}) {
		t.Errorf("stream B2_SCHEDULE captures %q, want b2.schedule.>", subj)
	}
	if _, err := js.Consumer(ctx, "B2_SCHEDULE", "b2bridge"); err != nil {
		t.Errorf("consumer b2bridge: %v", err)
	}
	for _, bucket := range []string{"B2_TASKS", "B2_TASKS_MEMBERS", "B2_TASKS_BIZ"} {
		if _, err := js.KeyValue(ctx, bucket); err != nil {
			t.Errorf("bucket %s: %v", bucket, err)
		}
	}
	for name := range js.StreamNames(ctx).Name() {
		if strings.HasPrefix(name, "AX_") || strings.HasPrefix(name, "KV_AX_") {
			t.Errorf("stream %s of the default prefix exists", name)
		}
	}

	fires, err := nc.SubscribeSync("*.fire.>")
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("b2.schedule.sec")
	m.Header.Set("Ax-Task-Id", "sec-1")
	m.Data = []byte("payload")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatalf("schedule: %v", err)
	}
	got, err := fires.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no fire: %v", err)
	}
	if got.Subject != "b2.fire.sec" || !strings.HasPrefix(got.Reply, "b2.ack.sec.") {
		t.Errorf("fired on %q with reply %q, want b2.fire.sec and b2.ack.sec.…", got.Subject, got.Reply)
	}
	if err := got.Respond(nil); err != nil {
		t.Fatal(err)
	}
	if !poll(10*time.Second, func() bool {
		r, err := nc.Request("b2.api.task.get", []byte("sec-1"), 5*time.Second)
		var v struct{ Status string }
		return err == nil && json.Unmarshal(r.Data, &v) == nil && v.Status == "SUCCESS"
	}) {
		t.Error("b2.api.task.get sec-1 never answered SUCCESS after the ack")
	}
	info, err := nc.Request("$SRV.INFO.b2bridge", nil, 5*time.Second)
	if err != nil {
		t.Fatalf("micro service b2bridge: %v", err)
	}
	var svc struct {
		Name      string
		Endpoints []struct {
			Subject    string `json:"subject"`
			QueueGroup string `json:"queue_group"`
		}
	}
	if err := json.Unmarshal(info.Data, &svc); err != nil || svc.Name != "b2bridge" || len(svc.Endpoints) != 11 {
		t.Fatalf("service info %s (err %v)", info.Data, err)
	}
	for _, ep := range svc.Endpoints {
		if !strings.HasPrefix(ep.Subject, "b2.api.task.") && !strings.HasPrefix(ep.Subject, "b2.api.biz.") || ep.QueueGroup != "b2bridge" {
			t.Errorf("endpoint %+v, want b2.api.task.* or b2.api.biz.* in queue group b2bridge", ep)
		}
	}
}
