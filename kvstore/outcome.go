package kvstore

import (
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Unknown reports whether a write that failed with err may have landed all the same, so that the
// writer must read the record back before it acts on the failure (writes again, or takes the
// attempt for lost). It is the one place that decides so. The outcome is unknown when the write
// may have been sent and no answer came: a timeout, a deadline, the connection lost meanwhile, a
// batch left unanswered, and any error it does not know. An answer says nothing was stored: a
// conflict or a missing record (ErrConflict, ErrExists, ErrNotFound), a refusal for what the write
// is (Permanent), a busy key (10164) or no stream to take it (no responders).
func Unknown(err error) bool {
	switch {
	case err == nil, errors.Is(err, ErrConflict), errors.Is(err, ErrExists), errors.Is(err, ErrNotFound),
		errors.Is(err, errKeyBusy), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, nats.ErrNoResponders), Permanent(err):
		return false
	}
	return true
}
