package kvstore

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestUnknownOnlyWithoutAnAnswer(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("claim t1: %w", err) }
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{wrap(ErrConflict), false},
		{wrap(ErrExists), false},
		{wrap(ErrNotFound), false},
		{wrap(fmt.Errorf("%w: %w", errKeyBusy, context.DeadlineExceeded)), false},
		{wrap(jetstream.ErrNoStreamResponse), false},
		{wrap(nats.ErrNoResponders), false},
		{wrap(nats.ErrMaxPayload), false},
		{wrap(&jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamMessageExceedsMaximum}), false},
		{wrap(context.DeadlineExceeded), true},
		{wrap(nats.ErrTimeout), true},
		{wrap(nats.ErrConnectionClosed), true},
		{wrap(&jetstream.APIError{Code: 503, ErrorCode: 10008}), true},
		{errors.New("something else"), true},
	} {
		if got := Unknown(c.err); got != c.want {
			t.Errorf("Unknown(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
