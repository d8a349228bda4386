package bridge

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/micro"

	"github.com/axbridge/axbridge/kvstore"
)

// The task API: a NATS micro service (visible in `nats micro ls`), one endpoint per operation,
// served by every replica in a queue group. The request body is the task id (subjects.md, "Task API").
// The constants are those of the default prefix; a bridge serves <Config.Prefix>.api.task.*, as
// the micro service <Config.Prefix>bridge with that name as its queue group.
const (
	APIPrefix  = DefaultPrefix + ".api.task"
	APIGet     = APIPrefix + ".get"
	APICancel  = APIPrefix + ".cancel"
	APIRequeue = APIPrefix + ".requeue"

	apiVersion = "0.1.0"
)

// TaskView is a task record as the API shows it: times in RFC 3339, durations as Go durations.
type TaskView struct {
	ID            string              `json:"id"`
	BizType       string              `json:"biz_type"`
	Status        kvstore.Status      `json:"status"`
	Revision      uint64              `json:"revision"`
	DueAt         string              `json:"due_at"`
	Attempt       int                 `json:"attempt"`
	MaxRetry      int                 `json:"max_retry"`
	AckWait       string              `json:"ack_wait"`
	Backoff       []string            `json:"backoff"`
	LeaseUntil    string              `json:"lease_until,omitempty"`
	Owner         string              `json:"owner,omitempty"`
	CreatedAt     string              `json:"created_at"`
	UpdatedAt     string              `json:"updated_at"`
	FinishedAt    string              `json:"finished_at,omitempty"`
	LastError     string              `json:"last_error,omitempty"`
	Header        map[string][]string `json:"header,omitempty"`
	Payload       *string             `json:"payload,omitempty"`           // when it is UTF-8 text
	PayloadBinary []byte              `json:"payload_base64,omitempty"`    // otherwise
	PayloadCut    bool                `json:"payload_truncated,omitempty"` // a list shows the first bytes only
	Series        *SeriesView         `json:"series,omitempty"`
}

// apiTime is a record's time as the API shows it: the format of Ax-Due-At, "" for 0.
func apiTime(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format(DueAtLayout)
}

func viewOf(e kvstore.Entry) TaskView {
	t := &e.Task
	v := TaskView{
		ID: t.ID, BizType: t.BizType, Status: t.Status, Revision: e.Revision, DueAt: apiTime(t.DueAt),
		Attempt: t.Attempt, MaxRetry: t.MaxRetry, AckWait: t.AckWait.String(), LeaseUntil: apiTime(t.LeaseUntil),
		Owner: t.Owner, CreatedAt: apiTime(t.CreatedAt), UpdatedAt: apiTime(t.UpdatedAt), FinishedAt: apiTime(t.FinishedAt),
		LastError: t.LastError, Header: t.Header, Backoff: make([]string, len(t.Backoff)),
	}
	for i, d := range t.Backoff {
		v.Backoff[i] = d.String()
	}
	if utf8.Valid(t.Payload) {
		p := string(t.Payload)
		v.Payload = &p
	} else {
		v.PayloadBinary = t.Payload
	}
	v.Series = seriesViewOf(t.Series)
	return v
}

// startAPI registers the task API on the bridge's connection.
func (b *Bridge) startAPI(ctx context.Context) (micro.Service, error) {
	svc, err := micro.AddService(b.nc, micro.Config{
		Name:        b.cfg.subj.service,
		QueueGroup:  b.cfg.subj.service,
		Version:     apiVersion,
		Description: "ax bridge task API: get, cancel, requeue (the request body is the task id), reschedule, list, stats, replicas, bulk (JSON); bizType settings: biz.set (JSON), biz.get, biz.list",
		Metadata:    map[string]string{"replica": b.cfg.ReplicaID},
	})
	if err != nil {
		return nil, err
	}
	g := svc.AddGroup(b.cfg.subj.api)
	endpoints := []struct {
		name string
		h    func(context.Context, micro.Request, string)
	}{
		{"get", b.apiGet},
		{"cancel", b.apiCancel},
		{"requeue", b.apiRequeue},
	}
	for _, ep := range endpoints {
		h := ep.h
		if err := g.AddEndpoint(ep.name, micro.HandlerFunc(func(r micro.Request) {
			id := strings.TrimSpace(string(r.Data()))
			if err := kvstore.ValidateID(id); err != nil {
				_ = r.Error("400", "the request body must be a task id: "+strings.TrimPrefix(err.Error(), "kvstore: "), nil)
				return
			}
			h(ctx, r, id)
		})); err != nil {
			_ = svc.Stop()
			return nil, err
		}
	}
	for _, ep := range []struct {
		name string
		h    func(context.Context, micro.Request)
	}{{"reschedule", b.apiReschedule}, {"list", b.apiList}, {"stats", b.apiStats}, {"replicas", b.apiReplicas}, {"bulk", b.apiBulk}} {
		h := ep.h
		if err := g.AddEndpoint(ep.name, micro.HandlerFunc(func(r micro.Request) { h(ctx, r) })); err != nil {
			_ = svc.Stop()
			return nil, err
		}
	}
	if err := b.addBizEndpoints(ctx, svc); err != nil {
		_ = svc.Stop()
		return nil, err
	}
	return svc, nil
}

func (b *Bridge) apiGet(ctx context.Context, r micro.Request, id string) {
	e, err := b.store.Get(ctx, id)
	if err != nil {
		apiError(r, id, err)
		return
	}
	_ = r.RespondJSON(viewOf(e))
}

func (b *Bridge) apiCancel(ctx context.Context, r micro.Request, id string) {
	b.apiTransition(ctx, r, id, func(t kvstore.Task, now int64) (kvstore.Task, error) { return kvstore.Cancel(t, now) })
}

func (b *Bridge) apiRequeue(ctx context.Context, r micro.Request, id string) {
	b.apiTransition(ctx, r, id, func(t kvstore.Task, now int64) (kvstore.Task, error) { return kvstore.Requeue(t, now, now) })
}

// apiTransition applies an operator's transition by CAS, re-reading on conflict, and answers
// with the new record.
func (b *Bridge) apiTransition(ctx context.Context, r micro.Request, id string, next func(kvstore.Task, int64) (kvstore.Task, error)) {
	e, err := b.transition(ctx, id, next)
	switch {
	case errors.Is(err, errChanging):
		_ = r.Error("409", "task "+id+" keeps changing; try again", nil)
	case err != nil:
		apiError(r, id, err)
	default:
		b.log.Info("task changed by API", "task_id", id, "status", e.Task.Status)
		_ = r.RespondJSON(viewOf(e))
	}
}

// errChanging: a transition lost its CAS five times in a row.
var errChanging = errors.New("the task keeps changing")

// transition applies next to task id's record by CAS, re-reading on conflict, and returns the
// new record.
func (b *Bridge) transition(ctx context.Context, id string, next func(kvstore.Task, int64) (kvstore.Task, error)) (kvstore.Entry, error) {
	for range 5 {
		e, err := b.store.Get(ctx, id)
		if err != nil {
			return e, err
		}
		t, err := next(e.Task, b.cfg.Now().UnixMilli())
		if err != nil {
			return e, err
		}
		rev, err := b.store.Update(ctx, &t, e.Revision)
		if errors.Is(err, kvstore.ErrConflict) {
			continue
		}
		return kvstore.Entry{Task: t, Revision: rev}, err
	}
	return kvstore.Entry{}, errChanging
}

// apiError answers with a micro error: 404 not found, 409 not allowed in the task's state, 500 else.
func apiError(r micro.Request, id string, err error) {
	msg := strings.ReplaceAll(err.Error(), "kvstore: ", "")
	switch {
	case errors.Is(err, kvstore.ErrNotFound):
		_ = r.Error("404", "no task "+id, nil)
	case errors.Is(err, kvstore.ErrTransition):
		_ = r.Error("409", msg, nil)
	default:
		_ = r.Error("500", msg, nil)
	}
}
