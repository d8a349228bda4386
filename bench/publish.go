package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// payload is the body of every task.
var payload = []byte(`{"order":42,"note":"close if unpaid"}`)

// publishAll publishes msg(0..n-1) with pipelined JetStream publishes and waits until the stream
// accepted every one; a refused publish is an error. It reports progress while it waits.
func publishAll(ctx context.Context, p *progress, what string, nc *nats.Conn, n int, msg func(i int) *nats.Msg) error {
	var refused atomic.Int64
	var firstErr atomic.Value
	var sent atomic.Int64
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
			if refused.Add(1) == 1 {
				firstErr.Store(err)
			}
		}))
	if err != nil {
		return err
	}
	stop := p.every(what, func() string { return fmt.Sprintf("%d/%d accepted", sent.Load()-int64(js.PublishAsyncPending()), n) })
	defer stop()
	for i := range n {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		// A generous stall wait: under fsync the server is slow to ack, not failing.
		if _, err := js.PublishMsgAsync(msg(i), jetstream.WithStallWait(time.Minute)); err != nil {
			return fmt.Errorf("publish %d of %d: %w", i, n, err)
		}
		sent.Add(1)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	if k := refused.Load(); k > 0 {
		return fmt.Errorf("%d of %d publishes refused, first: %v", k, n, firstErr.Load())
	}
	return nil
}
