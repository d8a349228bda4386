package kvstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/natstest"
)

// A waiter that reaches an op only after its deadline passed, while its answer is already there,
// reports the answer, not "outcome unknown" (select chooses at random among ready cases).
func TestCompleteAnsweredAfterDeadline(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc := natstest.Connect(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := OpenJetStore(ctx, js, Config{})
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		// The answer is there, and the op's deadline has passed.
		ok := make(chan *jetstream.PubAck, 1)
		ok <- &jetstream.PubAck{Sequence: 7}
		opCtx, opCancel := context.WithCancel(context.Background())
		opCancel()
		got := errNotCalled
		op := &asyncOp{ctx: opCtx, cancel: opCancel, paf: answeredFuture{ok: ok},
			finish: func(_ context.Context, seq uint64, err error) { got = err }}
		s.complete(op, make(chan nats.Status))
		if got != nil {
			t.Fatalf("op answered before the waiter came reported %v", got)
		}
	}
}

var errNotCalled = errors.New("finish not called")

// answeredFuture is a PubAckFuture whose answer has come.
type answeredFuture struct {
	ok  chan *jetstream.PubAck
	msg *nats.Msg
}

func (f answeredFuture) Ok() <-chan *jetstream.PubAck { return f.ok }
func (f answeredFuture) Err() <-chan error            { return nil }
func (f answeredFuture) Msg() *nats.Msg               { return f.msg }
