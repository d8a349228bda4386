package bridge

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/axbridge/axbridge/kvstore"
)

// APIReschedule moves a WAITING task, or a series' next occurrence, to a new due time.
const APIReschedule = APIPrefix + ".reschedule"

// rescheduleReq is the body of ax.api.task.reschedule: the task id and one of delay (from now)
// and due_at, as Ax-Delay and Ax-Deliver-At take them.
type rescheduleReq struct {
	ID    string `json:"id"`
	Delay string `json:"delay"`
	DueAt string `json:"due_at"`
}

// apiReschedule answers ax.api.task.reschedule (subjects.md, "Task API").
func (b *Bridge) apiReschedule(ctx context.Context, r micro.Request) {
	var req rescheduleReq
	if err := json.Unmarshal(r.Data(), &req); err != nil {
		_ = r.Error("400", `the request body must be JSON: {"id":"<task id>","delay":"10m"} or {"id":"<task id>","due_at":"<RFC 3339>"}`, nil)
		return
	}
	req.ID = strings.TrimSpace(req.ID)
	if err := kvstore.ValidateID(req.ID); err != nil {
		_ = r.Error("400", "id: "+strings.TrimPrefix(err.Error(), "kvstore: "), nil)
		return
	}
	now := b.cfg.Now()
	due, msg := b.cfg.rescheduleDue(req, now)
	if msg != "" {
		_ = r.Error("400", msg, nil)
		return
	}
	b.apiTransition(ctx, r, req.ID, func(t kvstore.Task, nowMs int64) (kvstore.Task, error) {
		return kvstore.Reschedule(t, nowMs, due)
	})
}

// rescheduleDue is the new due time a reschedule asks for (UTC Unix ms, rounded up), or why it
// cannot be taken.
func (c *Config) rescheduleDue(req rescheduleReq, now time.Time) (int64, string) {
	switch {
	case (req.Delay == "") == (req.DueAt == ""):
		return 0, "give one of delay and due_at"
	case req.Delay != "":
		d, err := parseDuration(req.Delay)
		if err != nil || d < 0 || d > c.MaxHorizon {
			return 0, "delay " + req.Delay + ": want a duration from 0 to the maximum horizon " + c.MaxHorizon.String()
		}
		return addMs(now.UnixMilli(), d), ""
	}
	at, err := parseTime(req.DueAt)
	if err != nil || at.After(now.Add(c.MaxHorizon)) {
		return 0, "due_at " + req.DueAt + ": want RFC 3339 or Unix milliseconds, within the maximum horizon " + c.MaxHorizon.String()
	}
	ms := at.UnixMilli()
	if at.Sub(time.UnixMilli(ms)) > 0 {
		ms++
	}
	return ms, ""
}
