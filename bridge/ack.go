package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/internal/retry"
	"github.com/axbridge/axbridge/kvstore"
)

// ackKind is what a consumer's reply asks for (subjects.md, "Ack bodies").
type ackKind uint8

const (
	ackOK ackKind = iota + 1
	ackNak
	ackTerm
	ackProgress
)

// ackReq is one reply to a fire message, or the no-responders status NATS sent in its place.
type ackReq struct {
	msg          *nats.Msg
	noResponders bool
}

type ackBody struct {
	kind   ackKind
	delay  time.Duration // ackNak: < 0 means the task's backoff
	reason string        // ackTerm
}

// parseAckBody reads the bodies nats.go's Msg.Ack, Nak, NakWithDelay, Term, TermWithReason and
// InProgress send. Like JetStream, anything it does not know is a positive ack.
func parseAckBody(data []byte) ackBody {
	data = bytes.TrimSpace(data)
	switch {
	case bytes.HasPrefix(data, []byte("-NAK")):
		b := ackBody{kind: ackNak, delay: -1}
		if rest := bytes.TrimSpace(data[4:]); len(rest) > 0 {
			var d struct {
				Delay int64 `json:"delay"`
			}
			if json.Unmarshal(rest, &d) == nil && d.Delay >= 0 {
				b.delay = time.Duration(d.Delay)
			}
		}
		return b
	case bytes.HasPrefix(data, []byte("+TERM")):
		return ackBody{kind: ackTerm, reason: truncateReason(bytes.TrimSpace(data[5:]))}
	case bytes.HasPrefix(data, []byte("+WPI")):
		return ackBody{kind: ackProgress}
	default:
		return ackBody{kind: ackOK}
	}
}

// maxReason bounds a +TERM reason kept in the record's last_error (review N12): a longer one could
// make the DEAD record too large to store, and the term would never be applied.
const maxReason = kvstore.MaxReasonLen

// truncateReason is r as text, cut to maxReason bytes at a UTF-8 boundary, with "…" if cut.
func truncateReason(r []byte) string {
	if len(r) <= maxReason {
		return string(r)
	}
	cut := maxReason - len("…")
	for cut > 0 && !utf8.RuneStart(r[cut]) {
		cut--
	}
	return string(r[:cut]) + "…"
}

// Pending limits of the ack subscriptions: beyond them the client drops acks (counted in
// ax_ack_dropped_total). A dropped ack costs its attempt a lease expiry and a retry, never the task.
const (
	ackPendingMsgs  = 64 << 10
	ackPendingBytes = 64 << 20
)

// onAck runs on the goroutine of a partition's ack subscription (members.go subscribes to
// ax.ack.*.<partition>.> for each partition this replica owns, and keeps it for a lease after the
// partition moved away). It takes consumer replies, and the no-responders status NATS sends the
// publishing connection for a fire that nobody received (it reaches the firing replica, which
// owns the partition and so has the subscription). It blocks while the ack workers are busy, which
// leaves further acks queued in the client up to the pending limits. Once Stop has taken the last
// acks (acksEnd), nothing is queued any more: the attempt's lease runs out instead.
func (b *Bridge) onAck(m *nats.Msg) {
	switch m.Header.Get(statusHeader) {
	case "":
		b.enqueueAck(ackReq{msg: m})
	case "503":
		b.enqueueAck(ackReq{msg: m, noResponders: true})
	}
}

func (b *Bridge) enqueueAck(r ackReq) {
	select {
	case b.acks <- r:
	case <-b.acksEnd:
	}
}

func (b *Bridge) ackWorker(ctx context.Context) {
	for {
		select {
		case r := <-b.acks:
			b.applyAck(ctx, r)
		case <-b.acksEnd:
			for {
				select {
				case r := <-b.acks:
					b.applyAck(ctx, r)
				default:
					return
				}
			}
		}
	}
}

// ackOp is one reply, parsed.
type ackOp struct {
	req     ackReq
	addr    ackAddr
	body    ackBody
	reason  string // for a nak: what LastError records
	release func() // ends its hold on the attempt's lease (Bridge.hand); idempotent
}

// errOtherBizType: a reply on the ack subject of another bizType than the task's, which NATS
// permissions may allow a consumer that never received the task (permissions.md).
var errOtherBizType = errors.New("ack subject names another bizType than the task's")

// transition computes the record after the reply, or an error if the reply is stale.
func (op *ackOp) transition(t kvstore.Task, nowMs int64) (kvstore.Task, error) {
	if t.BizType != op.addr.bizType {
		return t, errOtherBizType
	}
	tok := op.addr.token
	switch op.body.kind {
	case ackNak:
		return kvstore.Nak(t, tok, nowMs, op.body.delay, op.reason)
	case ackTerm:
		return kvstore.Term(t, tok, nowMs, op.body.reason)
	case ackProgress:
		return kvstore.InProgress(t, tok, nowMs)
	}
	return kvstore.Ack(t, tok, nowMs)
}

// respond answers a sync ack (AckSync, nats req). It is called only once the new state is durable
// or the reply was found stale; a reply that could not be applied gets no answer, so that the
// caller's request times out and it knows the outcome is not settled.
func (op *ackOp) respond(outcome string) {
	if op.req.msg.Reply != "" && !op.req.noResponders {
		_ = op.req.msg.RespondMsg(&nats.Msg{Header: nats.Header{HeaderAck: []string{outcome}}})
	}
}

// applyAck applies one consumer reply to the task record by CAS. For an attempt this replica
// fired, the claimed record is in memory and the write is pipelined; otherwise the record is read
// first. A write that fails is settled by reading the record back (applyAckRead).
func (b *Bridge) applyAck(ctx context.Context, r ackReq) {
	addr, ok := b.cfg.subj.parseAckSubject(r.msg.Subject)
	if !ok || addr.partition >= b.nparts || kvstore.Partition(addr.id, b.nparts) != addr.partition {
		b.log.Debug("ack on an unknown subject", "subject", r.msg.Subject)
		return
	}
	op := &ackOp{req: r, addr: addr, body: ackBody{kind: ackNak, delay: -1}, reason: "no responders",
		release: b.hand.hold(addr.id, addr.token, b.cfg.Now().UnixMilli())}
	if !r.noResponders {
		op.body, op.reason = parseAckBody(r.msg.Data), "nak"
	}
	e, cached := b.fired.take(addr.id, addr.token)
	if !cached {
		b.applyAckRead(ctx, op, nil)
		return
	}
	next, err := op.transition(e.Task, b.nowMsUp())
	if err != nil {
		b.ackStale(op, e, err)
		return
	}
	// Its room on the settle queue is taken before the write, so that a write that fails
	// always finds it (settleQueue); Stop meanwhile leaves the ack unanswered.
	size := ackSize(op, stubOf(&next))
	if !b.settle.reserve(ctx, size) {
		op.release()
		return
	}
	b.pipelined.Add(1)
	b.store.UpdateAsync(ctx, &next, e.Revision, func(rev uint64, err error) {
		defer b.pipelined.Done()
		if err == nil {
			b.settle.release(size)
			b.ackApplied(op, &next, rev)
			return
		}
		var wrote *kvstore.Task
		if !errors.Is(err, kvstore.ErrConflict) {
			b.storeFailed(opAck, op.addr.id, err)
		}
		if kvstore.Unknown(err) {
			wrote = stubOf(&next)
		}
		// Settled by a settle worker: this goroutine completes other writes.
		b.pipelined.Add(1)
		b.settle.failed <- failedAck{op: op, wrote: wrote, size: size}
	})
}

// applyAckRead applies a reply by reading the record and writing it back. It goes on until the
// reply is applied or found stale (its claim is over), whatever the lease says meanwhile: a
// conflict reads again at once, a store error after a bounded back-off. Only ctx (Stop) ends it
// otherwise, and then the reply is not answered. wrote is a write of this reply whose outcome is
// unknown, if any: if the record read back is that write (or a later one of the same kind, which
// may land late, after a retry of it lost its CAS), it is the reply applied.
func (b *Bridge) applyAckRead(ctx context.Context, op *ackOp, wrote *kvstore.Task) {
	defer op.release()
	wait := retry.Backoff{Policy: retry.Ack}
	conflicts := 0
	var unknown []kvstore.Task // writes of this reply that may have landed, the last few
	if wrote != nil {
		unknown = append(unknown, *wrote)
	}
	for {
		e, err := b.getBounded(ctx, op.addr.id)
		switch {
		case errors.Is(err, kvstore.ErrNotFound):
			op.respond(AckStale) // the record is gone: the claim is over
			return
		case err != nil:
			b.storeFailed(opAckRead, op.addr.id, err)
			if !wait.Next(ctx) {
				return
			}
			continue
		}
		if slices.ContainsFunc(unknown, func(w kvstore.Task) bool { return sameWrite(&e.Task, &w) }) {
			b.ackApplied(op, &e.Task, e.Revision)
			return
		}
		next, err := op.transition(e.Task, b.nowMsUp())
		if err != nil {
			b.ackStale(op, e, err)
			return
		}
		wctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
		rev, err := b.store.Update(wctx, &next, e.Revision)
		cancel()
		switch {
		case err == nil:
			b.ackApplied(op, &next, rev)
			return
		case errors.Is(err, kvstore.ErrConflict), errors.Is(err, kvstore.ErrNotFound):
			// Someone else wrote (or an earlier write of ours landed late): read again, at once
			// the first time.
			if conflicts++; conflicts > 1 && !wait.Next(ctx) {
				return
			}
		case kvstore.Permanent(err):
			b.m.ack.storeError(opAck, err)
			if b.abandon(ctx, e, opAck, err) && wait.Next(ctx) {
				continue // the DEAD write failed for the moment: read again, and retry the reply
			}
			return
		default:
			b.storeFailed(opAck, op.addr.id, err)
			if kvstore.Unknown(err) {
				if len(unknown) == maxUnknownWrites {
					unknown = unknown[1:]
				}
				unknown = append(unknown, *stubOf(&next))
			}
			if !wait.Next(ctx) {
				return
			}
		}
	}
}

// maxUnknownWrites is how many writes of one reply with unknown outcomes applyAckRead remembers.
const maxUnknownWrites = 8

// sameWrite reports whether the stored record s is the write w (a transition stamps UpdatedAt and
// changes the status, lease or due time).
func sameWrite(s, w *kvstore.Task) bool {
	return s.Status == w.Status && s.UpdatedAt == w.UpdatedAt && s.LeaseUntil == w.LeaseUntil &&
		s.DueAt == w.DueAt && s.Claim == w.Claim && s.Owner == w.Owner && s.LastError == w.LastError
}

func (b *Bridge) ackStale(op *ackOp, e kvstore.Entry, err error) {
	op.release()
	b.log.Debug("ack ignored", "task_id", op.addr.id, "claim", op.addr.token, "status", e.Task.Status, "err", err)
	b.m.acks.WithLabelValues(e.Task.BizType, "stale").Inc()
	op.respond(AckStale)
}

// ackApplied finishes a reply whose write is durable at rev.
func (b *Bridge) ackApplied(op *ackOp, next *kvstore.Task, rev uint64) {
	op.release()
	if next.Status == kvstore.StatusRunning { // in progress: the attempt goes on
		b.fired.put(kvstore.Entry{Task: *next, Revision: rev})
	}
	b.m.acks.WithLabelValues(next.BizType, ackLabel(op.body.kind, op.req.noResponders)).Inc()
	op.respond(AckApplied)
	if kvstore.Died(next) {
		b.dead(next)
	}
}

func ackLabel(k ackKind, noResponders bool) string {
	switch {
	case noResponders:
		return "no_responders"
	case k == ackNak:
		return "nak"
	case k == ackTerm:
		return "term"
	case k == ackProgress:
		return "in_progress"
	}
	return "ack"
}

// statusHeader is where nats.go puts a status line such as no-responders' 503.
const statusHeader = "Status"
