package kvstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Pipelined writes (the single path; jetstore_group.go groups them into atomic batches).
//
// An async call encodes the record, publishes it with js.PublishMsgAsync carrying the expected
// last subject sequence, and appends the pending op to s.queue. Up to maxWaiters goroutines, started
// when work arrives and gone when the queue is empty, take ops in FIFO order and wait for each
// one's PubAckFuture, its deadline (ctx, or Config.Timeout when ctx has none) or the connection
// closing, then call done exactly once. Acks come back in publish order on one connection, so
// waiting in FIFO order costs nothing; a slow done delays at most the ops its waiter would take.
//
// Back-pressure is nats.go's: once the JetStream context has its maximum of pending acks
// (jetstream.WithPublishAsyncMaxPending, 4000 by default), PublishMsgAsync stalls until one is
// answered, up to the op's deadline; the caller of the async method blocks that long.

// maxWaiters bounds the goroutines that wait for async outcomes.
const maxWaiters = 4

// asyncOp is one async operation whose outcome is pending.
type asyncOp struct {
	ctx    context.Context // the op's deadline
	cancel context.CancelFunc
	paf    jetstream.PubAckFuture // nil if err is set
	err    error                  // failure before or during the publish
	// finish maps the outcome and calls the caller's done; the waiter calls it exactly once.
	finish func(ctx context.Context, seq uint64, err error)
	class  string // the record's bizType: the grouper sends round-robin across them
}

// CreateAsync is Create without waiting. A conflict on the pipelined create (the key has a record,
// or a delete marker) is settled by a synchronous Create, which handles markers and returns the
// existing record with ErrExists.
func (s *JetStore) CreateAsync(ctx context.Context, t *Task, done func(Entry, error)) {
	key, val, err := s.encode(t)
	var tc Task
	var m *nats.Msg
	if err == nil {
		tc, m = *t, s.putMsg(t, key, val, 0)
	}
	s.submit(ctx, classOf(t), m, err, func(ctx context.Context, seq uint64, err error) {
		switch {
		case err == nil:
			done(Entry{Task: tc, Revision: seq}, nil)
		case m != nil && errors.Is(mapError(err), ErrConflict):
			done(s.create(ctx, &tc, key, val))
		case m != nil:
			done(Entry{}, fmt.Errorf("create %s: %w", tc.ID, mapError(err)))
		default:
			done(Entry{}, err)
		}
	})
}

// UpdateAsync is Update without waiting.
func (s *JetStore) UpdateAsync(ctx context.Context, t *Task, rev uint64, done func(uint64, error)) {
	key, val, err := s.encode(t)
	var m *nats.Msg
	if err == nil {
		m = s.putMsg(t, key, val, rev)
	}
	s.submit(ctx, classOf(t), m, err, func(ctx context.Context, seq uint64, err error) {
		if m != nil && keyBusy(err) { // not stored: ask again, synchronously (casPublish)
			var ack *jetstream.PubAck
			if ack, err = s.casPublish(ctx, s.putMsg(t, key, val, rev)); err == nil {
				seq = ack.Sequence
			}
		}
		if err != nil {
			if m != nil {
				err = fmt.Errorf("update %s at revision %d: %w", t.ID, rev, mapError(err))
			}
			done(0, err)
			return
		}
		done(seq, nil)
	})
}

// DeleteAsync is Delete without waiting.
func (s *JetStore) DeleteAsync(ctx context.Context, id string, rev uint64, done func(error)) {
	err := ValidateID(id)
	var m *nats.Msg
	if err == nil {
		m = s.purgeMsg(Key(id, s.cfg.Partitions), rev)
	}
	s.submit(ctx, "", m, err, func(ctx context.Context, _ uint64, err error) {
		if m != nil && keyBusy(err) { // not stored: ask again, synchronously (casPublish)
			_, err = s.casPublish(ctx, s.purgeMsg(Key(id, s.cfg.Partitions), rev))
		}
		if err != nil && m != nil {
			err = fmt.Errorf("delete %s at revision %d: %w", id, rev, mapError(err))
		}
		done(err)
	})
}

// submit starts the write m (unless err is already set): into the grouper if the store groups
// its writes (jetstore_group.go), else as a single pipelined publish. class is the record's
// bizType, by which the grouper takes turns.
func (s *JetStore) submit(ctx context.Context, class string, m *nats.Msg, err error, finish func(context.Context, uint64, error)) {
	op := &asyncOp{err: err, finish: finish, class: class}
	op.ctx, op.cancel = withTimeout(ctx, s.cfg.Timeout)

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		op.err = ErrClosed
		go s.complete(op, nil)
		return
	}
	s.ops.Add(1)
	s.mu.Unlock()

	if op.err == nil {
		op.err = op.ctx.Err()
	}
	if op.err == nil && s.group != nil {
		s.group.add(op, m)
		return
	}
	s.publish(op, m)
}

// publish sends m as a single pipelined write (unless op.err is set) and queues op for a waiter.
func (s *JetStore) publish(op *asyncOp, m *nats.Msg) {
	if op.err == nil {
		op.err = op.ctx.Err()
	}
	if op.err == nil && s.js.Conn().IsClosed() {
		// nats.go reports it unwrapped if no async publish has made its reply handler yet.
		op.err = errConnClosed
	}
	if op.err == nil {
		s.singles.Add(1)
		deadline, _ := op.ctx.Deadline()
		opts := append(waitForLeader(op.ctx), jetstream.WithStallWait(max(time.Until(deadline), time.Millisecond)))
		op.paf, op.err = s.pub.PublishMsgAsync(m, opts...)
		if errors.Is(op.err, jetstream.ErrTooManyStalledMsgs) {
			op.err = fmt.Errorf("kvstore: too many writes pending: %w", op.err)
		}
	}
	s.await(op)
}

// await queues op, published or failed, for a waiter.
func (s *JetStore) await(op *asyncOp) {
	s.mu.Lock()
	s.queue = append(s.queue, op)
	if s.waiters < maxWaiters {
		s.waiters++
		go s.wait()
	}
	s.mu.Unlock()
}

// wait completes queued ops in FIFO order until the queue is empty.
func (s *JetStore) wait() {
	nc := s.js.Conn()
	closed := nc.StatusChanged(nats.CLOSED)
	defer nc.RemoveStatusListener(closed)
	for {
		s.mu.Lock()
		if len(s.queue) == 0 {
			s.waiters--
			s.mu.Unlock()
			return
		}
		op := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		s.mu.Unlock()
		s.complete(op, closed)
		s.ops.Done()
	}
}

// complete waits for op's outcome and calls its finish.
func (s *JetStore) complete(op *asyncOp, connClosed <-chan nats.Status) {
	defer op.cancel()
	if op.err != nil {
		op.finish(op.ctx, 0, op.err)
		return
	}
	if s.js.Conn().IsClosed() {
		op.finish(op.ctx, 0, errConnClosed)
		return
	}
	if answered(op) { // a waiter that comes late to an answered op must not call it unknown
		return
	}
	select {
	case ack := <-op.paf.Ok():
		op.finish(op.ctx, ack.Sequence, nil)
	case err := <-op.paf.Err():
		op.finish(op.ctx, 0, err)
	case <-op.ctx.Done():
		if !answered(op) {
			op.finish(op.ctx, 0, fmt.Errorf("kvstore: no answer, outcome unknown: %w", op.ctx.Err()))
		}
	case <-connClosed:
		if !answered(op) {
			op.finish(op.ctx, 0, errConnClosed)
		}
	}
}

// answered calls op's finish if its answer has come (select picks at random among ready cases, so
// the deadline and the answer are checked apart); false if there is none yet.
func answered(op *asyncOp) bool {
	select {
	case ack := <-op.paf.Ok():
		op.finish(op.ctx, ack.Sequence, nil)
	case err := <-op.paf.Err():
		op.finish(op.ctx, 0, err)
	default:
		return false
	}
	return true
}

var errConnClosed = fmt.Errorf("kvstore: outcome unknown: %w", nats.ErrConnectionClosed)

// Close waits until every async operation started before it has called done (each is bounded by
// its deadline), and makes later async calls fail with ErrClosed. Synchronous methods keep
// working; the connection is the caller's. Close is idempotent.
func (s *JetStore) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.ops.Wait()
	return nil
}

// classOf is the class the grouper takes turns by: t's bizType ("" for none).
func classOf(t *Task) string {
	if t == nil {
		return ""
	}
	return t.BizType
}
