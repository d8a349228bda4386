package bridge

import (
	"context"
	"sync"

	"github.com/axbridge/axbridge/bridge/internal/sched"

	"github.com/axbridge/axbridge/kvstore"
)

// Bounds of the pipelined acks a replica holds (review N6): those whose write is in flight plus
// those whose write failed and that wait to be settled by reading their record back.
const (
	settleQueueLen   = 4096
	settleQueueBytes = 16 << 20
	// settleWorkers settle the failed ones, each with its own store calls.
	settleWorkers = 64
	// ackOpOverhead is roughly what a queued ack costs besides its message and record stub.
	ackOpOverhead = 512
)

// settleQueue holds the pipelined acks whose write failed until a settle worker reads each back
// and applies it (applyAckRead). An ack takes its room before its write (reserve), so a write
// that fails always finds it; while the queue is full the ack workers wait, and later acks wait in
// the ack subscriptions' pending buffers, whose limits drop them as they do under any overload.
// During a store outage the goroutines and memory the acks hold so stay bounded.
type settleQueue struct {
	failed chan failedAck // write completions → settle workers; never full (reserve)
	room   chan struct{}  // signalled (capacity 1) when room was given back

	mu       sync.Mutex
	n, bytes int // room taken: acks whose write is in flight or failed
	maxN     int
	maxBytes int
}

// failedAck is an ack whose pipelined write failed: wrote is that write (without the payload)
// if its outcome is unknown.
type failedAck struct {
	op    *ackOp
	wrote *kvstore.Task
	size  int
}

func newSettleQueue(maxN, maxBytes int) *settleQueue {
	return &settleQueue{failed: make(chan failedAck, maxN), room: make(chan struct{}, 1), maxN: maxN, maxBytes: maxBytes}
}

// reserve waits for room for an ack of size bytes; false if ctx ended first. An ack larger than
// the byte bound gets room when it would be alone.
func (q *settleQueue) reserve(ctx context.Context, size int) bool {
	for {
		q.mu.Lock()
		if q.n < q.maxN && (q.bytes+size <= q.maxBytes || q.n == 0) {
			q.n++
			q.bytes += size
			more := q.n < q.maxN && q.bytes < q.maxBytes
			q.mu.Unlock()
			if more {
				q.signal() // another waiter may fit too
			}
			return true
		}
		q.mu.Unlock()
		select {
		case <-q.room:
		case <-ctx.Done():
			return false
		}
	}
}

// release gives back the room of an ack of size bytes.
func (q *settleQueue) release(size int) {
	q.mu.Lock()
	q.n--
	q.bytes -= size
	q.mu.Unlock()
	q.signal()
}

func (q *settleQueue) signal() {
	select {
	case q.room <- struct{}{}:
	default:
	}
}

// held is the room taken: acks and their bytes.
func (q *settleQueue) held() (n, bytes int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n, q.bytes
}

// ackSize is what an ack whose write failed holds while it waits: its message, its reason and
// the stub of its write.
func ackSize(op *ackOp, stub *kvstore.Task) int {
	m := op.req.msg
	n := ackOpOverhead + len(m.Subject) + len(m.Reply) + len(m.Data) + len(op.reason) + len(op.body.reason)
	for k, vs := range m.Header {
		n += len(k)
		for _, v := range vs {
			n += len(v)
		}
	}
	return n + sched.RecordBytes(stub)
}

// stubOf is t without its payload and caller headers, which sameWrite does not compare.
func stubOf(t *kvstore.Task) *kvstore.Task {
	s := *t
	s.Payload, s.Header = nil, nil
	return &s
}

// settleWorker settles failed acks until ctx (Stop's last step) ends; then it lets go of those
// still queued, unanswered (their leases decide, as for a bridge that stopped).
func (b *Bridge) settleWorker(ctx context.Context) {
	defer b.settlers.Done()
	q := b.settle
	for {
		select {
		case f := <-q.failed:
			b.applyAckRead(ctx, f.op, f.wrote)
			q.release(f.size)
			b.pipelined.Done()
		case <-ctx.Done():
			for {
				select {
				case f := <-q.failed:
					f.op.release()
					q.release(f.size)
					b.pipelined.Done()
				default:
					return
				}
			}
		}
	}
}
