package ui

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
)

// What the page shows, as the task API answers it (subjects.md).

type stats struct {
	BizTypes map[string]*bizStats `json:"biz_types"`
	Total    bizStats             `json:"total"`
	Replicas int                  `json:"replicas"`
	At       string               `json:"at"`
}

type bizStats struct {
	Waiting int `json:"waiting"`
	Running int `json:"running"`
	Dead    int `json:"dead"`
	Due     struct {
		Overdue int `json:"overdue"`
		Minute  int `json:"within_1m"`
		Hour    int `json:"within_1h"`
		Later   int `json:"later"`
	} `json:"due"`
	OverdueFor string `json:"overdue_for"`
	Paused     bool   `json:"paused"`
	Lateness   *struct {
		P50   string `json:"p50"`
		P99   string `json:"p99"`
		Fires int64  `json:"fires"`
	} `json:"lateness"`
}

type task struct {
	ID        string `json:"id"`
	BizType   string `json:"biz_type"`
	Status    string `json:"status"`
	DueAt     string `json:"due_at"`
	Attempt   int    `json:"attempt"`
	LastError string `json:"last_error"`
	Payload   string `json:"payload"`
	Binary    []byte `json:"payload_base64"`
	Cut       bool   `json:"payload_truncated"`
	Series    *struct {
		Every    string `json:"every"`
		Cron     string `json:"cron"`
		TimeZone string `json:"time_zone"`
		Tick     string `json:"tick"`
		NextTick string `json:"next_tick"`
		Run      int    `json:"run"`
		Overlap  string `json:"overlap"`
		Misfire  string `json:"misfire"`
	} `json:"series"`
}

type page struct {
	Tasks      []task `json:"tasks"`
	NextCursor string `json:"next_cursor"`
	Total      int    `json:"total"`
}

type replicas struct {
	Replicas []struct {
		ID          string `json:"id"`
		Partitions  []int  `json:"partitions"`
		Owned       int    `json:"owned"`
		Loading     []int  `json:"loading"`
		Housekeeper bool   `json:"housekeeper"`
		Indexed     int    `json:"indexed"`
		LeaseLeft   string `json:"lease_left"`
	} `json:"replicas"`
	Partitions int `json:"partitions"`
}

// apiError is an error answer of the task API.
type apiError struct{ code, msg string }

func (e apiError) Error() string { return e.code + " " + e.msg }

// call requests <prefix>.api.<op> and decodes the answer into out.
func (s *Server) call(ctx context.Context, op string, body any, out any) error {
	var data []byte
	switch b := body.(type) {
	case nil:
	case string: // a task id
		data = []byte(b)
	default:
		data, _ = json.Marshal(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := s.nc.RequestWithContext(ctx, s.cfg.Prefix+".api."+op, data)
	if errors.Is(err, nats.ErrNoResponders) {
		return errors.New("no bridge answers on " + s.cfg.Prefix + ".api." + op)
	}
	if err != nil {
		return err
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		return apiError{code, m.Header.Get("Nats-Service-Error")}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(m.Data, out)
}
