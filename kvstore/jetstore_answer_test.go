package kvstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// Async writes the server never answers are forgotten after Config.AnswerTimeout (review N1): a
// stream leader that steps down drops the writes it had queued without a word, and each one held
// a slot of nats.go's async publisher (and the write's message) for good, until every write
// stalled. Here the bucket's stream stores writes without answering them (NoAck): each write
// reports an unknown outcome at its own deadline, and nats.go's pending count falls to 0 once the
// answer timeout has passed.
func TestJetStoreForgetsUnansweredWrites(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	cfg := kvstore.Config{Bucket: newBucketName(), BatchMax: 1, AnswerTimeout: time.Second}
	s := openJetStore(t, js, cfg)
	ctx := testContext(t)
	stream, err := js.Stream(ctx, "KV_"+cfg.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sc := info.Config
	sc.NoAck = true
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		t.Fatalf("stream without acks: %v", err)
	}
	const n = 50
	done := make(chan outcome, n)
	for i := range n {
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		s.CreateAsync(wctx, newTask(fmt.Sprintf("unanswered-%d", i)), func(e kvstore.Entry, err error) { done <- outcome{e.Revision, err} })
	}
	for range n {
		if o := await(t, done); o.err == nil || errors.Is(o.err, kvstore.ErrConflict) {
			t.Fatalf("an unanswered write reported %v; want an unknown outcome", o.err)
		}
	}
	if p := kvstore.AsyncPendingForTest(s); p == 0 {
		t.Fatal("no write is pending right after their deadlines: the stream answered them")
	}
	checkFor(t, func() bool { return kvstore.AsyncPendingForTest(s) == 0 },
		"the unanswered writes forgotten by nats.go after the answer timeout of 1s")
}
