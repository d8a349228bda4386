package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// Bulk operations (subjects.md, "Bulk operations"): requeue, cancel, delete or reschedule every
// task a filter selects. A dry run (the default) counts them and shows a sample; a real run is a
// job, kept in the settings bucket under bulk.<job> and run by one replica at a paced rate, page
// by page in due order, its progress written after every page. A job whose replica stops is taken
// over by the housekeeper once its lease ends, from the page it had reached. The start and the
// end of a job are audit events on <prefix>.audit.<bizType>.
const (
	APIBulk     = APIPrefix + ".bulk"
	AuditPrefix = DefaultPrefix + ".audit."

	// DefaultBulkRate is a job's pace (tasks per second) unless the request gives one.
	DefaultBulkRate = 100
	// MaxBulkRate bounds it: a bulk job must not crowd out the fires.
	MaxBulkRate = 5000
	// bulkSample is how many tasks a dry run shows.
	bulkSample = 10
)

// bulkRequest is the body of a bulk request.
type bulkRequest struct {
	Action string      `json:"action"` // requeue, cancel, delete, reschedule
	Filter listRequest `json:"filter"`
	DryRun *bool       `json:"dry_run,omitempty"` // default true
	Rate   float64     `json:"rate,omitempty"`    // tasks per second
	Delay  string      `json:"delay,omitempty"`   // reschedule: from the moment each task is moved
	DueAt  string      `json:"due_at,omitempty"`  // reschedule: to this time
	By     string      `json:"by,omitempty"`      // who asks, as the caller says (see audit)
	Job    string      `json:"job,omitempty"`     // a job's progress, or with Stop: stop it
	Stop   bool        `json:"stop,omitempty"`
}

// BulkDryRun is the answer to a dry run.
type BulkDryRun struct {
	DryRun bool       `json:"dry_run"`
	Action string     `json:"action"`
	Count  int        `json:"count"`
	Sample []TaskView `json:"sample"`
}

// BulkJob is a job's record, and the answer to a real run or a progress request.
type BulkJob struct {
	Job        string       `json:"job"`
	Action     string       `json:"action"`
	Filter     censusFilter `json:"filter"`
	Rate       float64      `json:"rate"`
	Delay      string       `json:"delay,omitempty"`
	DueAt      string       `json:"due_at,omitempty"`
	By         string       `json:"by"`
	Verified   bool         `json:"verified"` // By is the NATS user the server named (a service import)
	State      string       `json:"state"`    // running, done, stopped, failed
	Replica    string       `json:"replica"`
	LeaseUntil string       `json:"lease_until,omitempty"`
	Matched    int          `json:"matched"` // selected when it started
	Done       int          `json:"done"`
	Skipped    int          `json:"skipped"` // changed since it started, or no longer in a state the action takes
	Failed     int          `json:"failed"`
	CursorDue  int64        `json:"cursor_due_ms,omitempty"`
	CursorID   string       `json:"cursor_id,omitempty"`
	StartedAt  string       `json:"started_at"`
	UpdatedAt  string       `json:"updated_at"`
	FinishedAt string       `json:"finished_at,omitempty"`
	LastError  string       `json:"last_error,omitempty"`
}

const bulkExample = `{"action":"requeue","filter":{"biz_type":"pay","status":["DEAD"]},"dry_run":false,"rate":100}`

// parseBulk reads and checks a bulk request that starts a job (or dry-runs one).
func (b *Bridge) parseBulk(q bulkRequest) (BulkJob, error) {
	j := BulkJob{Action: q.Action, Rate: q.Rate, Delay: q.Delay, DueAt: q.DueAt, By: q.By}
	switch q.Action {
	case "requeue", "cancel", "delete":
		if q.Delay != "" || q.DueAt != "" {
			return j, fmt.Errorf("delay and due_at are for reschedule, not %s", q.Action)
		}
	case "reschedule":
		if _, msg := b.cfg.rescheduleDue(rescheduleReq{Delay: q.Delay, DueAt: q.DueAt}, b.cfg.Now()); msg != "" {
			return j, errors.New("reschedule: " + msg)
		}
	default:
		return j, fmt.Errorf("action %q: want requeue, cancel, delete or reschedule", q.Action)
	}
	if q.Filter.Limit != 0 || q.Filter.Cursor != "" {
		return j, errors.New("filter: limit and cursor are for list; a bulk job takes every task the filter selects")
	}
	f, _, err := q.Filter.filter()
	if err != nil {
		return j, fmt.Errorf("filter: %w", err)
	}
	if f.BizType == "" && len(f.Statuses) == 0 && f.IDPrefix == "" && f.DueAfter == 0 && f.DueBefore == 0 && !f.Series {
		return j, errors.New(`filter: empty; a bulk job needs at least one of biz_type, status, id_prefix, due_after and due_before`)
	}
	j.Filter = f
	switch {
	case q.Rate == 0:
		j.Rate = DefaultBulkRate
	case q.Rate < 0 || q.Rate > MaxBulkRate:
		return j, fmt.Errorf("rate %v: want 1 to %d tasks per second", q.Rate, MaxBulkRate)
	}
	return j, nil
}

// apiBulk answers a bulk request: a dry run, a new job, a job's progress, or a stop.
func (b *Bridge) apiBulk(ctx context.Context, r micro.Request) {
	var q bulkRequest
	dec := json.NewDecoder(bytes.NewReader(r.Data()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&q); err != nil {
		_ = r.Error("400", "the request body must be JSON such as "+bulkExample+": "+err.Error(), nil)
		return
	}
	if q.Job != "" {
		b.bulkProgress(ctx, r, q)
		return
	}
	j, err := b.parseBulk(q)
	if err != nil {
		_ = r.Error("400", err.Error(), nil)
		return
	}
	j.By, j.Verified = requester(r.Headers(), q.By)
	page, err := b.listPage(ctx, j.Filter, bulkSample)
	if err != nil {
		censusError(r, err)
		return
	}
	if q.DryRun == nil || *q.DryRun {
		_ = r.RespondJSON(BulkDryRun{true, j.Action, page.Total, page.Tasks})
		return
	}
	j.Matched = page.Total
	if err := b.startBulk(ctx, &j); err != nil {
		_ = r.Error("500", "start the job: "+err.Error(), nil)
		return
	}
	_ = r.RespondJSON(j)
}

// requester is who sent a request: the user the server names in Nats-Request-Info (it does so
// for requests that cross accounts through a service import), else what the caller says.
func requester(h micro.Headers, said string) (string, bool) {
	var ci struct {
		User    string `json:"user"`
		Account string `json:"acc"`
	}
	if raw := h.Get("Nats-Request-Info"); raw != "" && json.Unmarshal([]byte(raw), &ci) == nil && ci.User != "" {
		return ci.Account + "/" + ci.User, true
	}
	if said = strings.TrimSpace(said); said == "" {
		said = "unknown"
	}
	return said, false
}

// bulkProgress answers with a job's record, after asking it to stop if q says so.
func (b *Bridge) bulkProgress(ctx context.Context, r micro.Request, q bulkRequest) {
	kv := b.svc.biz.kv
	for range 5 {
		e, err := kv.Get(ctx, "bulk."+q.Job)
		if errors.Is(err, jetstream.ErrKeyNotFound) || q.Job != strings.TrimSpace(q.Job) || strings.ContainsAny(q.Job, ".*> ") {
			_ = r.Error("404", "no bulk job "+q.Job, nil)
			return
		}
		if err != nil {
			_ = r.Error("500", err.Error(), nil)
			return
		}
		var j BulkJob
		if err := json.Unmarshal(e.Value(), &j); err != nil {
			_ = r.Error("500", "job record: "+err.Error(), nil)
			return
		}
		if !q.Stop || j.State != "running" {
			_ = r.RespondJSON(j)
			return
		}
		j.State, j.FinishedAt = "stopped", apiTime(b.cfg.Now().UnixMilli())
		data, _ := json.Marshal(j)
		if _, err := kv.Update(ctx, e.Key(), data, e.Revision()); err == nil {
			b.audit(j)
			_ = r.RespondJSON(j)
			return
		}
	}
	_ = r.Error("409", "job "+q.Job+" keeps changing; try again", nil)
}

// startBulk stores a new job, held by this replica, and runs it.
func (b *Bridge) startBulk(ctx context.Context, j *BulkJob) error {
	now := apiTime(b.cfg.Now().UnixMilli())
	j.Job, j.State, j.Replica, j.StartedAt, j.UpdatedAt = uuid.NewString(), "running", b.cfg.ReplicaID, now, now
	j.LeaseUntil = apiTime(b.cfg.Now().Add(b.bulkLeaseOf()).UnixMilli())
	data, _ := json.Marshal(j)
	rev, err := b.svc.biz.kv.Create(ctx, "bulk."+j.Job, data)
	if err != nil {
		return err
	}
	b.audit(*j)
	b.runBulk(*j, rev)
	return nil
}

// audit publishes the job's state on <prefix>.audit.<bizType> (_all for a filter of no bizType).
func (b *Bridge) audit(j BulkJob) {
	biz := j.Filter.BizType
	if biz == "" {
		biz = "_all"
	}
	data, _ := json.Marshal(j)
	if err := b.nc.Publish(b.cfg.subj.audit+biz, data); err != nil {
		b.log.Warn("audit event not published", "job", j.Job, "err", err)
	}
	b.log.Info("bulk job", "job", j.Job, "action", j.Action, "state", j.State, "by", j.By, "done", j.Done,
		"skipped", j.Skipped, "failed", j.Failed)
}
