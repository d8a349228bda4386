package ui

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
)

// What the page shows, as the task API answers it (subjects.md): the bridge's own answer types.
type (
	stats    = bridge.Stats
	bizStats = bridge.BizStats
	task     = bridge.TaskView
	page     = bridge.ListPage
	replicas = bridge.ReplicasPage
)

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
