package bench

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// basePayload is the body of every task at the default --payload-bytes.
const basePayload = `{"order":42,"note":"close if unpaid"}`

// taskPayload is the body of every task, n bytes long (at least len(basePayload)): basePayload
// with a "pad" field of x's when n is larger, so it stays readable JSON.
func taskPayload(n int) []byte {
	if n <= len(basePayload) {
		return []byte(basePayload)
	}
	pad := n - len(basePayload) - len(`,"pad":""`)
	if pad < 0 {
		return []byte(basePayload + strings.Repeat(" ", n-len(basePayload)))
	}
	return []byte(basePayload[:len(basePayload)-1] + `,"pad":"` + strings.Repeat("x", pad) + `"}`)
}

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
