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

// applyAck applies one consumer reply to the task record by CAS, re-reading on conflict.
func (b *Bridge) applyAck(ctx context.Context, r ackReq) {
	_, attempt, id, ok := parseAckSubject(r.msg.Subject)
	if !ok {
		b.log.Warn("ack on an unknown subject", "subject", r.msg.Subject)
		return
	}
	body := ackBody{kind: ackNak, delay: -1}
	reason := "no responders"
	if !r.noResponders {
		body = parseAckBody(r.msg.Data)
		reason = "nak"
	}
	defer func() {
		if r.msg.Reply != "" && !r.noResponders {
			_ = r.msg.Respond(nil)
		}
	}()
	for range 5 {
		var err error
		e, cached := b.fired.take(id, attempt)
		if !cached {
			e, err = b.store.Get(ctx, id)
			if errors.Is(err, kvstore.ErrNotFound) {
				return
			}
			if err != nil {
				b.log.Warn("ack: read task", "task_id", id, "err", err)
				return // the lease runs out and the attempt is retried
			}
		}
		nowMs := b.cfg.Now().UnixMilli()
		var next kvstore.Task
		switch body.kind {
		case ackOK:
			next, err = kvstore.Ack(e.Task, attempt, nowMs)
		case ackNak:
			next, err = kvstore.Nak(e.Task, attempt, nowMs, body.delay, reason)
		case ackTerm:
			next, err = kvstore.Term(e.Task, attempt, nowMs, body.reason)
		case ackProgress:
			next, err = kvstore.InProgress(e.Task, attempt, nowMs)
		}
		if err != nil {
			b.log.Debug("ack ignored", "task_id", id, "attempt", attempt, "status", e.Task.Status, "err", err)
			b.m.acks.WithLabelValues(e.Task.BizType, "stale").Inc()
			return
		}
		rev, err := b.store.Update(ctx, &next, e.Revision)
		if err != nil {
			if errors.Is(err, kvstore.ErrConflict) {
				continue
			}
			b.log.Warn("ack: update task", "task_id", id, "err", err)
			return
		}
		if next.Status == kvstore.StatusRunning { // in progress: the attempt goes on
			b.fired.put(kvstore.Entry{Task: next, Revision: rev})
		}
		b.m.acks.WithLabelValues(next.BizType, ackLabel(body.kind, r.noResponders)).Inc()
		if next.Status == kvstore.StatusDead {
			b.dead(&next)
		}
		return
	}
	b.log.Warn("ack: gave up after repeated conflicts", "task_id", id)
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
