package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"

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
		return ackBody{kind: ackTerm, reason: string(bytes.TrimSpace(data[5:]))}
	case bytes.HasPrefix(data, []byte("+WPI")):
		return ackBody{kind: ackProgress}
	default:
		return ackBody{kind: ackOK}
	}
}

// onAck runs on the ack subscription's goroutine. It blocks when the ack workers are busy, which
// leaves further acks queued in the client (the subscription has no pending limit), never dropped.
func (b *Bridge) onAck(m *nats.Msg) {
	if m.Header.Get(statusHeader) != "" {
		return // statuses are handled by noResponders on the firing replica
	}
	b.acks <- ackReq{msg: m}
}

// noResponders runs on this replica's own ack subjects, where NATS reports a fire message that
// nobody received. Ordinary acks arrive here too; the queue subscription handles those.
func (b *Bridge) noResponders(m *nats.Msg) {
	if m.Header.Get(statusHeader) == "503" {
		b.acks <- ackReq{msg: m, noResponders: true}
	}
}

func (b *Bridge) ackWorker(ctx context.Context) {
	defer b.workers.Done()
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
	id      string
	attempt int
	body    ackBody
	reason  string // for a nak: what LastError records
}

// transition computes the record after the reply, or an error if the reply is stale.
func (op *ackOp) transition(t kvstore.Task, nowMs int64) (kvstore.Task, error) {
	switch op.body.kind {
	case ackNak:
		return kvstore.Nak(t, op.attempt, nowMs, op.body.delay, op.reason)
	case ackTerm:
		return kvstore.Term(t, op.attempt, nowMs, op.body.reason)
	case ackProgress:
		return kvstore.InProgress(t, op.attempt, nowMs)
	}
	return kvstore.Ack(t, op.attempt, nowMs)
}

// respond answers a sync ack (AckSync, nats req) once the outcome is settled.
func (op *ackOp) respond() {
	if op.req.msg.Reply != "" && !op.req.noResponders {
		_ = op.req.msg.Respond(nil)
	}
}

// applyAck applies one consumer reply to the task record by CAS. For an attempt this replica
// fired, the claimed record is in memory and the write is pipelined; otherwise, or when the
// cached record lost its CAS, the record is read first.
func (b *Bridge) applyAck(ctx context.Context, r ackReq) {
	_, attempt, id, ok := parseAckSubject(r.msg.Subject)
	if !ok {
		b.log.Warn("ack on an unknown subject", "subject", r.msg.Subject)
		return
	}
	op := &ackOp{req: r, id: id, attempt: attempt, body: ackBody{kind: ackNak, delay: -1}, reason: "no responders"}
	if !r.noResponders {
		op.body, op.reason = parseAckBody(r.msg.Data), "nak"
	}
	e, cached := b.fired.take(id, attempt)
	if !cached {
		b.applyAckRead(ctx, op)
		return
	}
	next, err := op.transition(e.Task, b.cfg.Now().UnixMilli())
	if err != nil {
		b.ackStale(op, e, err)
		return
	}
	b.pipelined.Add(1)
	b.store.UpdateAsync(ctx, &next, e.Revision, func(rev uint64, err error) {
		defer b.pipelined.Done()
		if errors.Is(err, kvstore.ErrConflict) {
			b.pipelined.Add(1)
			go func() {
				defer b.pipelined.Done()
				b.applyAckRead(ctx, op)
			}()
			return
		}
		b.ackApplied(op, &next, rev, err)
	})
}

// applyAckRead applies a reply by reading the record and writing it back, re-reading on conflict.
func (b *Bridge) applyAckRead(ctx context.Context, op *ackOp) {
	for range 5 {
		e, err := b.store.Get(ctx, op.id)
		if errors.Is(err, kvstore.ErrNotFound) {
			op.respond()
			return
		}
		if err != nil {
			b.log.Warn("ack: read task", "task_id", op.id, "err", err)
			op.respond()
			return // the lease runs out and the attempt is retried
		}
		next, err := op.transition(e.Task, b.cfg.Now().UnixMilli())
		if err != nil {
			b.ackStale(op, e, err)
			return
		}
		rev, err := b.store.Update(ctx, &next, e.Revision)
		if errors.Is(err, kvstore.ErrConflict) {
			continue
		}
		b.ackApplied(op, &next, rev, err)
		return
	}
	b.log.Warn("ack: gave up after repeated conflicts", "task_id", op.id)
	op.respond()
}

func (b *Bridge) ackStale(op *ackOp, e kvstore.Entry, err error) {
	b.log.Debug("ack ignored", "task_id", op.id, "attempt", op.attempt, "status", e.Task.Status, "err", err)
	b.m.acks.WithLabelValues(e.Task.BizType, "stale").Inc()
	op.respond()
}

// ackApplied finishes a reply whose write completed (err nil) or failed for good.
func (b *Bridge) ackApplied(op *ackOp, next *kvstore.Task, rev uint64, err error) {
	defer op.respond()
	if err != nil {
		b.log.Warn("ack: update task", "task_id", op.id, "err", err)
		return // the lease runs out and the attempt is retried
	}
	if next.Status == kvstore.StatusRunning { // in progress: the attempt goes on
		b.fired.put(kvstore.Entry{Task: *next, Revision: rev})
	}
	b.m.acks.WithLabelValues(next.BizType, ackLabel(op.body.kind, op.req.noResponders)).Inc()
	if next.Status == kvstore.StatusDead {
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
