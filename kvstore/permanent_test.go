package kvstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// TestPermanent classifies real failed writes (and, where a server will not easily produce one,
// the API error it would send): permanent ones can never succeed as sent, the rest may.
func TestPermanent(t *testing.T) {
	t.Parallel()
	const maxPayload = 32 * 1024
	srv := natstest.RunServer(t, func(o *server.Options) { o.MaxPayload = maxPayload })
	js := newJS(t, srv.ClientURL())
	ctx := testContext(t)
	quick := func(t *testing.T, js jetstream.JetStream) *kvstore.JetStore {
		return openJetStore(t, js, kvstore.Config{Bucket: newBucketName(), Timeout: 300 * time.Millisecond})
	}
	s := quick(t, js)
	sized := func(id string, n int) *kvstore.Task {
		task := newTask(id)
		task.Payload = make([]byte, n)
		return task
	}
	errs := map[string]error{}
	_, errs["over max_payload"] = s.Create(ctx, sized("big", maxPayload+1))
	_, errs["over max_payload, async"] = createAsync(ctx, s, sized("big", maxPayload+1))
	_, errs["update over max_payload"] = s.Update(ctx, sized("big", maxPayload+1), 1)

	small := quick(t, js) // a bucket whose stream takes messages of at most 1 KiB
	updateStream(t, js, small.Bucket(), func(c *jetstream.StreamConfig) { c.MaxMsgSize = 1024 })
	_, errs["over the stream's max message size"] = small.Create(ctx, sized("mid", 2048))

	sealed := quick(t, js)
	updateStream(t, js, sealed.Bucket(), func(c *jetstream.StreamConfig) { c.Sealed = true })
	_, errs["sealed stream"] = sealed.Create(ctx, newTask("late"))

	_, errs["invalid id"] = s.Create(ctx, newTask("bad id"))
	neg := newTask("neg")
	neg.Attempt = -1
	_, errs["unencodable task"] = s.Create(ctx, neg)
	_, errs["nil task"] = createAsync(ctx, s, nil)

	e := mustCreate(t, s, newTask("here"))
	_, errs["conflict"] = s.Update(ctx, newTask("here"), e.Revision+100)
	_, errs["exists"] = s.Create(ctx, newTask("here"))

	gone := quick(t, js) // its stream deleted: no one answers its writes
	if err := js.DeleteStream(ctx, "KV_"+gone.Bucket()); err != nil {
		t.Fatal(err)
	}
	_, errs["no stream"] = gone.Create(context.Background(), newTask("x"))

	nc := natstest.Connect(t, srv.ClientURL())
	cjs, _ := jetstream.New(nc)
	closing := quick(t, cjs)
	nc.Close()
	_, errs["connection closed"] = closing.Create(ctx, newTask("x"))

	srv2 := natstest.RunServer(t)
	away := quick(t, newJS(t, srv2.ClientURL()))
	srv2.Shutdown()
	_, errs["no server, timeout"] = away.Create(context.Background(), newTask("x"))
	_, errs["no server, async timeout"] = createAsync(context.Background(), away, newTask("y"))

	api := func(code jetstream.ErrorCode, status int) error {
		return fmt.Errorf("create x: %w", &jetstream.APIError{Code: status, ErrorCode: code, Description: "from the server"})
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"over max_payload", errs["over max_payload"], true},
		{"over max_payload, async", errs["over max_payload, async"], true},
		{"update over max_payload", errs["update over max_payload"], true},
		{"over the stream's max message size", errs["over the stream's max message size"], true},
		{"sealed stream", errs["sealed stream"], true},
		{"invalid id", errs["invalid id"], true},
		{"unencodable task", errs["unencodable task"], true},
		{"nil task", errs["nil task"], true},
		{"header over the limit (10097)", api(10097, 400), true},
		{"invalid TTL (10165)", api(10165, 400), true},
		{"TTLs disabled (10166)", api(10166, 400), true},
		{"bad request (10003)", api(jetstream.JSErrCodeBadRequest, 400), true},

		{"conflict", errs["conflict"], false},
		{"exists", errs["exists"], false},
		{"no stream", errs["no stream"], false},
		{"connection closed", errs["connection closed"], false},
		{"no server, timeout", errs["no server, timeout"], false},
		{"no server, async timeout", errs["no server, async timeout"], false},
		{"closed store", kvstore.ErrClosed, false},
		{"cluster not available (503, 10008)", api(10008, 503), false},
		{"no stream leader (10009)", api(10009, 500), false},
		{"account resources exceeded (10002)", api(10002, 400), false},
		{"no responders", fmt.Errorf("create x: %w", jetstream.ErrNoStreamResponse), false},
		{"request timeout", fmt.Errorf("create x: %w", nats.ErrTimeout), false},
		{"nil", nil, false},
	} {
		if tc.err == nil && tc.name != "nil" {
			t.Errorf("%s: the write did not fail", tc.name)
			continue
		}
		t.Logf("%s: %v", tc.name, tc.err)
		if got := kvstore.Permanent(tc.err); got != tc.want {
			t.Errorf("%s: Permanent(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

func updateStream(t *testing.T, js jetstream.JetStream, bucket string, change func(*jetstream.StreamConfig)) {
	t.Helper()
	cfg := streamConfig(t, js, bucket)
	change(&cfg)
	if _, err := js.UpdateStream(testContext(t), cfg); err != nil {
		t.Fatal(err)
	}
}
