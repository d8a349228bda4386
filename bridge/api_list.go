package bridge

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/micro"

	"github.com/axbridge/axbridge/kvstore"
)

// The list and stats endpoints (subjects.md, "Listing and counting"), answered by the census of
// every replica (census.go).
const (
	APIList     = APIPrefix + ".list"
	APIStats    = APIPrefix + ".stats"
	APIReplicas = APIPrefix + ".replicas"

	// DefaultListLimit and MaxListLimit bound a list page.
	DefaultListLimit = 100
	MaxListLimit     = 1000
	// listPreview is how much of a payload a listed task shows; get shows all of it.
	listPreview = 256
)

// listRequest is the body of a list request; every field is optional.
type listRequest struct {
	BizType   string           `json:"biz_type,omitempty"`
	Status    []kvstore.Status `json:"status,omitempty"`
	DueAfter  string           `json:"due_after,omitempty"`  // RFC 3339: due at or after
	DueBefore string           `json:"due_before,omitempty"` // RFC 3339: due before
	IDPrefix  string           `json:"id_prefix,omitempty"`
	Series    bool             `json:"series,omitempty"` // only recurring tasks
	Limit     int              `json:"limit,omitempty"`
	Cursor    string           `json:"cursor,omitempty"`
}

// ListPage is a list page (ax.api.task.list).
type ListPage struct {
	Tasks      []TaskView `json:"tasks"`
	NextCursor string     `json:"next_cursor"`
	Total      int        `json:"total"` // tasks the filter selects from the cursor on, this page's among them
}

const listExample = `{"biz_type":"orders","status":["DEAD"],"due_after":"2026-12-01T00:00:00Z","id_prefix":"pay-","limit":100,"cursor":""}`

// parseList reads a list request: an empty body selects everything.
func parseList(data []byte) (censusFilter, int, error) {
	var q listRequest
	if len(bytes.TrimSpace(data)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&q); err != nil {
			return censusFilter{}, 0, fmt.Errorf("the request body must be JSON such as %s: %v", listExample, err)
		}
	}
	return q.filter()
}

func (q listRequest) filter() (censusFilter, int, error) {
	f := censusFilter{BizType: q.BizType, Statuses: q.Status, IDPrefix: q.IDPrefix, Series: q.Series}
	if q.BizType != "" && !validBizType(q.BizType) {
		return f, 0, fmt.Errorf("biz_type %q: want one subject token of 1-64 characters from [A-Za-z0-9_-]", q.BizType)
	}
	for _, s := range q.Status {
		switch s {
		case kvstore.StatusWaiting, kvstore.StatusRunning, kvstore.StatusDead:
		case kvstore.StatusSuccess, kvstore.StatusCancelled:
			return f, 0, fmt.Errorf("status %s: the census lists WAITING, RUNNING and DEAD tasks; a finished task is read by id with get", s)
		default:
			return f, 0, fmt.Errorf("status %q: want WAITING, RUNNING or DEAD", s)
		}
	}
	var err error
	if f.DueAfter, err = apiTimeArg("due_after", q.DueAfter); err != nil {
		return f, 0, err
	}
	if f.DueBefore, err = apiTimeArg("due_before", q.DueBefore); err != nil {
		return f, 0, err
	}
	if q.Cursor != "" {
		if f.AfterDue, f.AfterID, err = parseCursor(q.Cursor); err != nil {
			return f, 0, err
		}
	}
	switch {
	case q.Limit < 0 || q.Limit > MaxListLimit:
		return f, 0, fmt.Errorf("limit %d: want 1 to %d", q.Limit, MaxListLimit)
	case q.Limit == 0:
		q.Limit = DefaultListLimit
	}
	return f, q.Limit, nil
}

// apiTimeArg parses an RFC 3339 time of the API: UTC Unix ms, 0 for "".
func apiTimeArg(name, s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("%s %q: want an RFC 3339 time such as 2026-12-01T08:00:00Z", name, s)
	}
	return t.UnixMilli(), nil
}

// A cursor is the last task of a page: its due time and id, opaque to the caller.
func makeCursor(due int64, id string) string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%d/%s", due, id))
}

func parseCursor(c string) (int64, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	due, id, ok := strings.Cut(string(raw), "/")
	var ms int64
	if err == nil && ok && id != "" {
		_, err = fmt.Sscan(due, &ms)
	}
	if err != nil || !ok || id == "" {
		return 0, "", errors.New("cursor: not one this API gave; pass next_cursor as it came, or none for the first page")
	}
	return ms, id, nil
}

// apiList answers a list request with one page, read fresh from the bucket.
func (b *Bridge) apiList(ctx context.Context, r micro.Request) {
	f, limit, err := parseList(r.Data())
	if err != nil {
		_ = r.Error("400", err.Error(), nil)
		return
	}
	page, err := b.listPage(ctx, f, limit)
	if err != nil {
		censusError(r, err)
		return
	}
	_ = r.RespondJSON(page)
}

// listPage gathers the replicas' lists, keeps the first limit tasks and reads their records.
func (b *Bridge) listPage(ctx context.Context, f censusFilter, limit int) (ListPage, error) {
	rs, err := b.askAll(ctx, censusAsk{Op: "list", Filter: f, Limit: limit}, false)
	if err != nil {
		return ListPage{}, err
	}
	ts, total := b.mergeTasks(rs)
	out := ListPage{Tasks: []TaskView{}, Total: total}
	if len(ts) > limit {
		ts = ts[:limit]
	}
	if len(ts) > 0 && total > len(ts) {
		last := ts[len(ts)-1]
		out.NextCursor = makeCursor(last.Due, last.ID)
	}
	ids := make([]string, len(ts))
	for i, t := range ts {
		ids[i] = t.ID
	}
	es, err := b.store.GetMany(ctx, ids)
	if err != nil {
		return ListPage{}, fmt.Errorf("read the page's records: %w", err)
	}
	byID := make(map[string]kvstore.Entry, len(es))
	for _, e := range es {
		byID[e.Task.ID] = e
	}
	for _, id := range ids {
		if e, ok := byID[id]; ok { // one deleted since is left out
			out.Tasks = append(out.Tasks, previewOf(e))
		}
	}
	return out, nil
}

// previewOf is a task's view with at most listPreview bytes of its payload.
func previewOf(e kvstore.Entry) TaskView {
	p := e.Task.Payload
	cut := len(p) > listPreview
	if cut {
		p = p[:listPreview]
		for len(p) > 0 && !utf8.Valid(p) && utf8.Valid(e.Task.Payload) {
			p = p[:len(p)-1] // not in the middle of a rune
		}
		e.Task.Payload = p
	}
	v := viewOf(e)
	v.PayloadCut = cut
	return v
}

// censusError answers with 503 when replicas did not answer for every partition, 500 else.
func censusError(r micro.Request, err error) {
	var un errUncovered
	if errors.As(err, &un) {
		_ = r.Error("503", err.Error(), nil)
		return
	}
	_ = r.Error("500", err.Error(), nil)
}
