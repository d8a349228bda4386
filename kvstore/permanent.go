package kvstore

import (
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream error codes of writes refused for what they are, not for the moment they came
// (nats-server's errors.json; nats.go names only some of them).
const (
	errCodeHeaderExceedsMaximum jetstream.ErrorCode = 10097 // a message header over 64 KiB
	errCodeStreamSealed         jetstream.ErrorCode = 10109 // the stream takes no more writes
	errCodeMessageTTLInvalid    jetstream.ErrorCode = 10165 // a Nats-TTL the server cannot read
	errCodeMessageTTLDisabled   jetstream.ErrorCode = 10166 // a Nats-TTL on a stream without AllowMsgTTL
)

// Permanent reports whether a failed write can never succeed as it was sent, so that sending it
// again is pointless: the task id is invalid (ErrInvalidID), the task cannot be encoded
// (ErrInvalidTask), the record is larger than the server's max_payload (nats.ErrMaxPayload) or
// than the bucket's stream allows (10054), or the stream refuses the message's form by its
// configuration (a header over its limit 10097, a sealed stream 10109, a TTL it cannot read 10165
// or does not allow 10166), or the request is malformed (10003).
//
// Everything else is reported as transient (false): no answer or a deadline (the outcome may even
// be unknown), no responders (no stream leader yet, or no stream at all: a bucket deleted by an
// operator can be created again, so a task is not refused for it), a closed or reconnecting
// connection, ErrClosed, 503s and resource limits. ErrConflict, ErrExists and ErrNotFound are
// answers the caller acts on, not failures, and are not permanent either.
func Permanent(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrInvalidID) || errors.Is(err, ErrInvalidTask) || errors.Is(err, nats.ErrMaxPayload) {
		return true
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case jetstream.JSErrCodeStreamMessageExceedsMaximum, errCodeHeaderExceedsMaximum, errCodeStreamSealed,
		errCodeMessageTTLInvalid, errCodeMessageTTLDisabled, jetstream.JSErrCodeBadRequest:
		return true
	}
	return false
}
