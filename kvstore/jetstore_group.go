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

// Grouped writes.
//
// Under sync_interval: always every JetStream write is an fsync, so one write per state change
// caps the store at the disk's fsync rate. Unless Config.BatchMax is 1, on a stream that allows
// atomic publish (server 2.12+), the async writes go through a grouper goroutine, started when
// work arrives and gone when it has none. With BatchMax above 1 it groups them always: it
// collects them into an open batch and flushes it when it holds BatchMax writes or BatchDelay
// after its first write joined. With BatchAuto (0, the default) it groups only while that pays,
// as an autoPolicy decides (jetstore_group_auto.go): in its single mode it sends each write on its
// own at once, as the single path does, keeping at most maxSinglesInFlight unanswered and the rest
// in order behind them (the backlog the policy sees, which a switch to batches takes at once); in
// its batch mode it groups as with BatchMax 1000. Every completion (a single write's answer, a
// committed batch) is reported to the policy with the mode the write was sent in, and the
// policy's answer applies from the next write the grouper sends. The rules below (order, one
// write per key per batch, refusal and unknown outcome, back-pressure) hold in both modes and
// across a switch: a switch changes only how the writes still in the grouper go out, in order. A flushed
// batch is one atomic batch publish, which the server checks and stores whole or not at all, with
// one fsync of the stream (one raft proposal on a replicated stream). Each message keeps its own
// headers: the expected last subject sequence (the CAS), Nats-TTL, the purge marker's rollup.
// The price: on one node with file storage the server stages each batch in a file store of its
// own that it fsyncs at the commit, so without sync_interval: always, where single writes are
// never fsynced, grouping is slower than single writes (bench/README.md, "After grouped writes"),
// which is why the automatic mode needs batches to beat singles by far before it keeps them.
//
// Order. The grouper sends every batch itself, in order, on the store's connection: the batch's
// messages as core publishes with jetstreamext's batch headers, its commit as a pipelined
// JetStream publish whose ack the waiters take like any other (jetstore_async.go). So writes
// reach the server in the order they were made, as single pipelined writes do, except that a
// second write to a key in the open batch goes in a later batch, and the writes of a refused
// batch go out again after it. (jetstreamext.BatchPublisher's CommitMsg waits for its answer on
// the caller's goroutine: committing several batches at once from several goroutines would let a
// later batch overtake an earlier one.) The synchronous Create, Update and Delete first wait
// until the grouper has sent what was made before them, so they too come after it.
//
// The server's rules shape the grouper (nats-server jetstream_batching.go, 2.15):
//   - at most 1000 messages per batch (JetStreamLimits.MaxBatchSize) and 50 batches open per
//     stream: BatchMax is at most maxBatchSize, and the grouper holds a batch back while
//     maxBatchesInFlight of its batches are unanswered (several bridge replicas share the
//     stream's 50);
//   - one write per key per batch: a second expected-sequence check of a subject already written
//     in the batch is refused (10164). A second write to a key in the open batch waits for the next
//     batch;
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
// Back-pressure: at most maxGroupedWrites(BatchMax) writes (autoGroupedWrites when automatic)
// wait in the grouper or fly in batches, besides single writes in flight (at most
// maxSinglesInFlight from an automatic grouper's single mode); beyond that the async call waits
// for room, up to the write's deadline. The grouper
// itself never waits for the waiters (a held-back batch waits for a wake), so a waiter's done
// may call into the store.

// Limits of atomic batch publish, as nats-server's defaults.
const (
	maxBatchSize       = 1000 // messages per batch (server: JetStreamLimits.MaxBatchSize)
	maxBatchesInFlight = 8    // unanswered batches of one store (server: 50 per stream)
)

// Limits of an automatic grouper. maxSinglesInFlight bounds its unanswered single writes: more
// wait in the grouper, where a switch to batches takes them at once, where their wait is the
// backlog the policy sees, and where they go out round-robin across bizTypes (fairQueue). It is
// the depth of the server's queue that every write waits behind: at 2048 an orders claim during a
// 50,000-task reports burst on a three-node cluster waited behind two thousand reports writes
// (orders p99 123 ms, alone 28 ms); at 256 with the fair queue, 25 ms, and the burst drained as
// fast (5.6 s against 5.9 s; axbridge bench --sync default --cluster --only isolation).
// autoGroupedWrites is its maxGroupedWrites: with the singles in flight, about as deep a pipeline
// as single writes alone have (nats.go's 4000 pending acks), so that a write waits no longer for
// its turn than it would on the single path.
const (
	maxSinglesInFlight = 256
	autoGroupedWrites  = 4096
)

// maxGroupedWrites is how many writes may wait in the grouper or fly in batches.
func maxGroupedWrites(batchMax int) int { return max(4096, (maxBatchesInFlight+1)*batchMax) }

// WriteStats counts how the async writes of a JetStore went out.
type WriteStats struct {
	Batches       uint64 // atomic batches committed
	BatchedWrites uint64 // writes in those batches
	Rejected      uint64 // batches the server refused; their writes went out again one by one
	Unknown       uint64 // batches without an answer; their writes reported "outcome unknown"
	Singles       uint64 // writes sent on their own (no grouping, a batch of one, or after a refusal)

	// With automatic grouping (Config.BatchMax BatchAuto): what the store decided.
	Auto     bool   // the store picks singles or batches by itself
	Batching bool   // it sends batches now (else singles)
	Probes   uint64 // measurement windows of the other way started (jetstore_group_auto.go)
	Switches uint64 // probes after which it kept the other way
}

// WriteStats reports how the async writes went out so far.
func (s *JetStore) WriteStats() WriteStats {
	st := WriteStats{Singles: s.singles.Load()}
	if g := s.group; g != nil {
		st.Batches, st.BatchedWrites = g.batches.Load(), g.batched.Load()
		st.Rejected, st.Unknown = g.rejected.Load(), g.unknown.Load()
		if g.auto {
			g.autoMu.Lock()
			st.Auto, st.Batching = true, g.policy.mode == sendBatches
			st.Probes, st.Switches = g.policy.probes, g.policy.switches
			g.autoMu.Unlock()
		}
	}
	return st
}

// Grouping reports whether the store groups its async writes into atomic batches.
func (s *JetStore) Grouping() bool { return s.group != nil }

// groupOp is an async write waiting in the grouper or flying in a batch, or a barrier.
type groupOp struct {
	op      *asyncOp
	msg     *nats.Msg     // the single write, headers and all; a batch sends a copy
	at      time.Time     // when the grouper took it
	barrier chan struct{} // instead of a write: closed once everything before it is sent
}

// grouper collects async writes into atomic batches.
type grouper struct {
	s      *JetStore
	max    int           // writes per batch
	delay  time.Duration // from the first write of an open batch to its flush
	room   chan struct{} // a token per write in the grouper or in flight: back-pressure
	flying atomic.Int64  // batches sent and not yet answered

	mu      sync.Mutex
	queue   []groupOp // written by add and sent, taken by run
	running bool      // a run goroutine is live; it clears this when it finds nothing to do
	wake    chan struct{}

	// testHookSend, if set, runs before each batch's messages are sent, with their subjects.
	testHookSend func(subjects []string)

	batches, batched, rejected, unknown atomic.Uint64

	// Automatic grouping (jetstore_group_auto.go); auto is fixed at creation.
	auto     bool
	batching atomic.Bool  // the policy's mode is sendBatches; read by run
	singles  atomic.Int64 // single writes sent by the grouper and not yet answered
	backlog  atomic.Bool  // run holds writes back for the limit in flight, or a full batch waits
	autoMu   sync.Mutex   // guards policy and pinned; taken by the waiters that report completions
	policy   *autoPolicy
	pinned   bool             // a test fixed the mode: the policy is not consulted
	now      func() time.Time // the policy's clock
}

func newGrouper(s *JetStore, batchMax int, delay time.Duration) *grouper {
	g := &grouper{s: s, max: batchMax, delay: delay, wake: make(chan struct{}, 1)}
	if batchMax == BatchAuto {
		g.max, g.auto, g.policy, g.now = maxBatchSize, true, newAutoPolicy(), time.Now
	}
	room := maxGroupedWrites(g.max)
	if g.auto {
		room = autoGroupedWrites
	}
	g.room = make(chan struct{}, room)
	return g
}

// observe feeds a completion to the policy and applies its answer.
func (g *grouper) observe(c completion) {
	g.autoMu.Lock()
	m := g.policy.mode
	if !g.pinned {
		m = g.policy.observe(g.now(), c)
	}
	g.autoMu.Unlock()
	if b := m == sendBatches; g.batching.Load() != b {
		g.batching.Store(b)
		g.poke()
	}
}

// pin fixes the automatic grouper's mode (tests).
func (g *grouper) pin(m sendMode) {
	g.autoMu.Lock()
	g.pinned, g.policy.mode = true, m
	g.autoMu.Unlock()
	g.batching.Store(m == sendBatches)
	g.poke()
}

// backedUp reports whether n writes that run could not send yet are a backlog: singles held back
// by maxSinglesInFlight, or, when batching, a full batch waiting or writes held back by
// maxBatchesInFlight (an open batch that waits for its delay is not one).
func (g *grouper) backedUp(n int) bool {
	if g.sendsSingles() {
		return n > 0
	}
	return n >= g.max || n > 0 && g.flying.Load() >= maxBatchesInFlight
}

// sendsSingles reports whether the grouper sends each write on its own now (automatic grouping
// that decided so).
func (g *grouper) sendsSingles() bool { return g.auto && !g.batching.Load() }

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

// run takes writes from the queue and sends them in batches, until nothing is left. The writes
// it holds go out round-robin across their bizTypes (fairQueue), each bizType's in order.
func (g *grouper) run() {
	var barriers []chan struct{}
	pending := newFairQueue() // taken from the queue and not yet sent
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		g.mu.Lock()
		in := g.queue
		g.queue = nil
		if len(in) == 0 && pending.len() == 0 {
			g.running = false
			g.backlog.Store(false)
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		now := time.Now()
		for _, o := range in {
			if o.barrier != nil {
				barriers = append(barriers, o.barrier)
				continue
			}
			o.at = now
			pending.push(o)
		}
		g.sendPending(pending, len(barriers) > 0)
		for _, b := range barriers {
			close(b)
		}
		barriers = nil
		if g.auto {
			g.backlog.Store(g.backedUp(pending.len()))
		}
		if pending.len() == 0 {
			continue
		}
		// Wait for more writes and the open batch's flush time, or, while batches are held back
		// (maxBatchesInFlight unanswered, or maxSinglesInFlight when sending singles), for an
		// answer.
		if held := g.flying.Load() >= maxBatchesInFlight; !held && pending.len() < g.max && !g.sendsSingles() {
			timer.Reset(max(g.delay-time.Since(pending.oldest()), 0))
		}
		select {
		case <-g.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// sendPending sends what the limits let out now (all of it when flush: a barrier waits).
func (g *grouper) sendPending(pending *fairQueue, flush bool) {
	for pending.len() > 0 {
		if g.sendsSingles() {
			if !flush && g.singles.Load() >= maxSinglesInFlight {
				return // a completion wakes us
			}
			g.send([]groupOp{pending.pop()})
			continue
		}
		due := pending.len() >= g.max || time.Since(pending.oldest()) >= g.delay
		if !flush && !(due && g.flying.Load() < maxBatchesInFlight) {
			return
		}
		g.send(pending.cut(g.max))
	}
}

// send publishes batch: one write on its own, more as an atomic batch whose commit the waiters
// take.
func (g *grouper) send(batch []groupOp) {
	mode := sendBatches // how the policy counts these writes: by the mode they were sent in
	if g.sendsSingles() {
		mode = sendSingles
	}
	live := batch[:0]
	for _, o := range batch {
		if err := o.op.ctx.Err(); err != nil { // never sent: it did not land
			o.op.err = err
			g.single(o, mode)
			continue
		}
		live = append(live, o)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		g.single(live[0], mode)
		return
	}
	bop := &asyncOp{finish: func(_ context.Context, seq uint64, err error) { g.settle(live, seq, err) }}
	bop.ctx, bop.cancel = context.WithDeadline(context.Background(), earliestDeadline(live))
	if err := g.publishBatch(bop, live); err != nil {
		bop.cancel()
		g.rejected.Add(1)
		for _, o := range live {
			g.single(o, sendBatches)
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

// single sends o on its own through the single path. An automatic grouper counts it until its
// answer, and reports its completion to the policy as a write sent in mode: a batch of one, or a
// write of a refused batch, counts as batching.
func (g *grouper) single(o groupOp, mode sendMode) {
	<-g.room
	if g.auto {
		g.singles.Add(1)
		finish := o.op.finish
		o.op.finish = func(ctx context.Context, seq uint64, err error) {
			g.singles.Add(-1)
			g.observe(completion{mode: mode, writes: 1, backlog: g.backlog.Load()})
			g.poke()
			finish(ctx, seq, err)
		}
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
		if g.auto {
			g.observe(completion{mode: sendBatches, writes: len(batch), backlog: g.backlog.Load()})
		}
		for i, o := range batch {
			g.done(o, seq-uint64(len(batch)-1-i), nil)
		}
	case notApplied(err):
		g.rejected.Add(1)
		for _, o := range batch {
			g.single(o, sendBatches)
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
