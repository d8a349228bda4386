package kvstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// Grouped writes: group commit.
//
// Under sync_interval: always every JetStream write is an fsync, so one write per state change
// caps the store at the disk's fsync rate; on a replicated bucket every write is a raft proposal.
// Unless Config.BatchMax is 1, on a stream that allows atomic publish (server 2.12+), the async
// writes go through a grouper goroutine, started when work arrives and gone when it has none. It
// keeps at most commitInFlight sends unanswered, a send being one write on its own or one atomic
// batch. A write that finds room goes out at once, on its own; writes that arrive while the
// sends in flight take up the room wait, and when an answer frees it they go out together as one
// batch of up to BatchMax (the oldest first, round-robin across bizTypes: fairQueue). So an idle
// store sends single writes with no added wait, a busy one sends batches whose size follows the
// load, and nothing is measured, probed or timed: the answers pace it, on any server setting. A
// batch is one atomic batch publish, which the server checks and stores whole or not at all,
// with one fsync of the stream (one raft proposal on a replicated stream). Each message keeps its
// own headers: the expected last subject sequence (the CAS), Nats-TTL, the purge marker's rollup.
//
// Order. The grouper sends every batch itself, in order, on the store's connection: the batch's
// messages as core publishes with jetstreamext's batch headers, its commit as a pipelined
// JetStream publish whose ack the waiters take like any other (jetstore_async.go). So writes
// reach the server in the order they were made, as single pipelined writes do, except that a
// second write to a key in a batch goes in a later send, and the writes of a refused batch go
// out again after it. (jetstreamext.BatchPublisher's CommitMsg waits for its answer on the
// caller's goroutine: committing several batches at once from several goroutines would let a
// later batch overtake an earlier one.) The synchronous Create, Update and Delete first wait
// until the grouper has sent what was made before them, so they too come after it.
//
// The server's rules shape the grouper (nats-server jetstream_batching.go, 2.15):
//   - at most 1000 messages per batch (JetStreamLimits.MaxBatchSize) and 50 batches open per
//     stream: BatchMax is at most maxBatchSize, and commitInFlight is far below 50 (several
//     bridge replicas share the stream's 50);
//   - one write per key per batch: a second expected-sequence check of a subject already written
//     in the batch is refused (10164). fairQueue.cut leaves a second write to a key for the next
//     send;
//   - Nats-Msg-Id and Nats-Expected-Last-Msg-Id are not allowed (the store uses neither);
//   - the batch is refused whole when any one check fails: one stale revision (10071), a key with
//     a write still in process on a replicated stream (10164), a create over a delete marker.
//
// Outcomes. A committed batch acks with the sequence of its last message; the stream stores a
// batch's messages in order and contiguously (one ingest goroutine on one node, one multi-entry
// proposal applied as a unit on a cluster), so write i of n gets revision last-(n-1-i). A batch
// the server refused (it answered with an error, or nothing took the commit) stored nothing: each
// of its writes is then sent again on its own through the single path (jetstore_async.go), which
// settles busy keys, creates over markers and conflicts as it always has, so every other write
// still lands exactly once and the stale one reports ErrConflict. A batch whose commit has no
// answer (deadline, connection lost) may or may not have landed: every write in it reports
// "outcome unknown", as a single write would, and is not sent again. A batch of one write is
// sent as a single write.
//
// Back-pressure: at most maxGroupedWrites(BatchMax) writes wait in the grouper or fly; beyond
// that the async call waits for room, up to the write's deadline. The grouper itself never waits
// for the waiters (it waits for a wake), so a waiter's done may call into the store.

// Limits of group commit.
const (
	maxBatchSize = 1000 // messages per batch (server: JetStreamLimits.MaxBatchSize)
)

// commitInFlight is how many sends (a single write, or a batch) the grouper keeps unanswered.
// Writes beyond them wait for an answer and then go out as one batch.
var commitInFlight int64 = 1

// maxGroupedWrites is how many writes may wait in the grouper or fly.
func maxGroupedWrites(batchMax int) int { return max(4096, int(commitInFlight+2)*batchMax) }

// WriteStats counts how the async writes of a JetStore went out.
type WriteStats struct {
	Batches       uint64 // atomic batches committed
	BatchedWrites uint64 // writes in those batches
	Rejected      uint64 // batches the server refused; their writes went out again one by one
	Unknown       uint64 // batches without an answer; their writes reported "outcome unknown"
	Singles       uint64 // writes sent on their own (no grouping, room in flight, or after a refusal)
}

// WriteStats reports how the async writes went out so far.
func (s *JetStore) WriteStats() WriteStats {
	st := WriteStats{Singles: s.singles.Load()}
	if g := s.group; g != nil {
		st.Batches, st.BatchedWrites = g.batches.Load(), g.batched.Load()
		st.Rejected, st.Unknown = g.rejected.Load(), g.unknown.Load()
	}
	return st
}

// Grouping reports whether the store groups its async writes into atomic batches.
func (s *JetStore) Grouping() bool { return s.group != nil }

// groupOp is an async write waiting in the grouper or flying in a batch, or a barrier.
type groupOp struct {
	op      *asyncOp
	msg     *nats.Msg     // the single write, headers and all; a batch sends a copy
	barrier chan struct{} // instead of a write: closed once everything before it is sent
}

// grouper groups async writes into atomic batches while sends are in flight.
type grouper struct {
	s      *JetStore
	max    int           // writes per batch
	room   chan struct{} // a token per write in the grouper or in flight: back-pressure
	flying atomic.Int64  // sends (single writes and batches) not yet answered

	mu      sync.Mutex
	queue   []groupOp // written by add and sent, taken by run
	running bool      // a run goroutine is live; it clears this when it finds nothing to do
	wake    chan struct{}

	// testHookSend, if set, runs before each batch's messages are sent, with their subjects.
	testHookSend func(subjects []string)

	batches, batched, rejected, unknown atomic.Uint64
}

func newGrouper(s *JetStore, batchMax int) *grouper {
	return &grouper{s: s, max: batchMax, wake: make(chan struct{}, 1),
		room: make(chan struct{}, maxGroupedWrites(batchMax))}
}

// add hands op to the grouper, waiting for room up to op's deadline.
func (g *grouper) add(op *asyncOp, m *nats.Msg) {
	select {
	case g.room <- struct{}{}:
	case <-op.ctx.Done():
		op.err = fmt.Errorf("kvstore: too many writes pending: %w", op.ctx.Err())
		g.s.publish(op, nil)
		return
	}
	g.enqueue(groupOp{op: op, msg: m})
}

// sent waits until every write handed to the grouper before it has been sent, or ctx ends.
func (g *grouper) sent(ctx context.Context) error {
	g.mu.Lock()
	idle := !g.running
	g.mu.Unlock()
	if idle {
		return nil
	}
	ch := make(chan struct{})
	g.enqueue(groupOp{barrier: ch})
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *grouper) enqueue(o groupOp) {
	g.mu.Lock()
	g.queue = append(g.queue, o)
	start := !g.running
	g.running = true
	g.mu.Unlock()
	if start {
		go g.run()
		return
	}
	g.poke()
}

func (g *grouper) poke() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// run takes writes from the queue and sends them, until nothing is left: whatever waits goes out
// as soon as a send in flight is answered.
func (g *grouper) run() {
	var barriers []chan struct{}
	pending := newFairQueue() // taken from the queue and not yet sent
	for {
		g.mu.Lock()
		in := g.queue
		g.queue = nil
		if len(in) == 0 && pending.len() == 0 {
			g.running = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		for _, o := range in {
			if o.barrier != nil {
				barriers = append(barriers, o.barrier)
				continue
			}
			pending.push(o)
		}
		g.sendPending(pending, len(barriers) > 0)
		for _, b := range barriers {
			close(b)
		}
		barriers = nil
		if pending.len() > 0 {
			<-g.wake // an answer, or more writes
		}
	}
}

// sendPending sends what the room in flight lets out now (all of it when flush: a barrier waits).
func (g *grouper) sendPending(pending *fairQueue, flush bool) {
	for pending.len() > 0 && (flush || g.flying.Load() < commitInFlight) {
		g.send(pending.cut(g.max))
	}
}

// send publishes batch: one write on its own, more as an atomic batch whose commit the waiters
// take.
func (g *grouper) send(batch []groupOp) {
	live := batch[:0]
	for _, o := range batch {
		if err := o.op.ctx.Err(); err != nil { // never sent: it did not land
			o.op.err = err
			g.single(o)
			continue
		}
		live = append(live, o)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		g.single(live[0])
		return
	}
	bop := &asyncOp{finish: func(_ context.Context, seq uint64, err error) { g.settle(live, seq, err) }}
	bop.ctx, bop.cancel = context.WithDeadline(context.Background(), earliestDeadline(live))
	if err := g.publishBatch(bop, live); err != nil {
		bop.cancel()
		g.rejected.Add(1)
		for _, o := range live {
			g.single(o)
		}
		return
	}
	g.flying.Add(1)
	g.s.ops.Add(1) // the waiter that completes bop marks it done
	g.s.await(bop)
}

// publishBatch sends batch's messages (copies: the batch headers must not reach a later single
// send) and, pipelined, its commit, whose future it sets in bop. An error means the commit was not
// sent, so nothing of the batch can land.
func (g *grouper) publishBatch(bop *asyncOp, batch []groupOp) error {
	if g.testHookSend != nil {
		subjects := make([]string, len(batch))
		for i, o := range batch {
			subjects[i] = o.msg.Subject
		}
		g.testHookSend(subjects)
	}
	nc := g.s.js.Conn()
	if nc.IsClosed() {
		return errConnClosed
	}
	id := uuid.NewString()
	last := len(batch) - 1
	for i, o := range batch[:last] {
		m := copyMsg(o.msg)
		m.Header.Set(jetstreamext.BatchIDHeader, id)
		m.Header.Set(jetstreamext.BatchSeqHeader, strconv.Itoa(i+1))
		if err := nc.PublishMsg(m); err != nil {
			return err
		}
	}
	m := copyMsg(batch[last].msg)
	m.Header.Set(jetstreamext.BatchIDHeader, id)
	m.Header.Set(jetstreamext.BatchSeqHeader, strconv.Itoa(last+1))
	m.Header.Set(jetstreamext.BatchCommitHeader, "1")
	deadline, _ := bop.ctx.Deadline()
	// No resend on "no responders": that is a refusal (nothing took the commit), settled below.
	paf, err := g.s.pub.PublishMsgAsync(m, jetstream.WithRetryAttempts(0),
		jetstream.WithStallWait(max(time.Until(deadline), time.Millisecond)))
	bop.paf = paf
	return err
}

// single sends o on its own through the single path, as a send in flight until its answer.
func (g *grouper) single(o groupOp) {
	<-g.room
	g.flying.Add(1)
	finish := o.op.finish
	o.op.finish = func(ctx context.Context, seq uint64, err error) {
		g.flying.Add(-1)
		g.poke()
		finish(ctx, seq, err)
	}
	g.s.publish(o.op, o.msg)
}

// settle completes the writes of a batch whose commit was answered with the last message's
// sequence seq, or failed with err.
func (g *grouper) settle(batch []groupOp, seq uint64, err error) {
	g.flying.Add(-1)
	g.poke()
	switch {
	case err == nil:
		g.batches.Add(1)
		g.batched.Add(uint64(len(batch)))
		for i, o := range batch {
			g.done(o, seq-uint64(len(batch)-1-i), nil)
		}
	case notApplied(err):
		g.rejected.Add(1)
		for _, o := range batch {
			g.single(o)
		}
	default:
		g.unknown.Add(1)
		err = fmt.Errorf("kvstore: batch of %d writes: outcome unknown: %w", len(batch), err)
		for _, o := range batch {
			g.done(o, 0, err)
		}
	}
}

// notApplied reports whether a batch whose commit failed with err certainly stored nothing: the
// server answered with an error (it checks the whole batch before storing any of it), or nothing
// took the commit (no responders).
func notApplied(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// done completes a grouped write.
func (g *grouper) done(o groupOp, seq uint64, err error) {
	o.op.finish(o.op.ctx, seq, err)
	o.op.cancel()
	<-g.room
	g.s.ops.Done()
}

func copyMsg(m *nats.Msg) *nats.Msg {
	return &nats.Msg{Subject: m.Subject, Data: m.Data, Header: maps.Clone(m.Header)}
}

func earliestDeadline(batch []groupOp) time.Time {
	var d time.Time
	for _, o := range batch {
		if od, _ := o.op.ctx.Deadline(); d.IsZero() || od.Before(d) {
			d = od
		}
	}
	return d
}
