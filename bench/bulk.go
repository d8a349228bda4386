package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
)

// bridgeBulk: --bulk-tasks tasks go DEAD (the consumer terminates each first fire); a dry run of
// their requeue counts them, then one bulk job at --bulk-rate requeues them, and each must fire
// exactly once more (the consumer acks the second fire). Lost: tasks that did not fire again;
// a third fire of any task fails the row.
func (r *runner) bridgeBulk(ctx context.Context, srv *serverSet, x *result) error {
	s, err := r.openBridge(ctx, srv)
	if err != nil {
		return err
	}
	defer s.close()
	n := r.o.bulkTasks
	var mu sync.Mutex
	count := map[string]int{}
	var again, extra int
	var last time.Time
	sub, err := s.nc.Subscribe(bridge.FirePrefix+"bulk", func(m *nats.Msg) {
		mu.Lock()
		id := m.Header.Get(bridge.HeaderTaskID)
		count[id]++
		c := count[id]
		switch {
		case c == 2:
			again, last = again+1, time.Now()
		case c > 2:
			extra++
		}
		mu.Unlock()
		if c == 1 {
			_ = m.Respond([]byte("+TERM"))
			return
		}
		_ = m.Respond(nil)
	})
	if err != nil {
		return err
	}
	_ = sub.SetPendingLimits(-1, -1)
	defer func() { _ = sub.Unsubscribe() }()
	if err := publishAll(ctx, r.p, "publish bulk", s.nc, n, func(i int) *nats.Msg {
		return bridgeSchedule(r.payload, "bulk", i, func(h nats.Header) { h.Set(bridge.HeaderMaxRetry, "0") })
	}); err != nil {
		return err
	}
	if err := r.waitFor(ctx, "DEAD", 10*time.Minute, func() bool { return deadCount(ctx, s.nc) >= n },
		func() string { return fmt.Sprintf("%d/%d DEAD", deadCount(ctx, s.nc), n) }); err != nil {
		return err
	}
	filter := map[string]any{"biz_type": "bulk", "status": []string{"DEAD"}}
	var dry struct{ Count int }
	t0 := time.Now()
	if err := apiJSON(ctx, s.nc, bridge.APIBulk, map[string]any{"action": "requeue", "filter": filter}, &dry); err != nil || dry.Count != n {
		return fmt.Errorf("dry run: count %d (%v), want %d", dry.Count, err, n)
	}
	x.vals["bulk_dry"] = float64(time.Since(t0).Microseconds()) / 1000
	var job struct{ Job string }
	t0 = time.Now()
	if err := apiJSON(ctx, s.nc, bridge.APIBulk, map[string]any{"action": "requeue", "filter": filter, "dry_run": false,
		"rate": r.o.bulkRate, "by": "axbench"}, &job); err != nil {
		return fmt.Errorf("start the job: %w", err)
	}
	err = r.waitFor(ctx, "fired again", 10*time.Minute, func() bool { mu.Lock(); defer mu.Unlock(); return again >= n },
		func() string { mu.Lock(); defer mu.Unlock(); return fmt.Sprintf("%d/%d fired again", again, n) })
	mu.Lock()
	defer mu.Unlock()
	x.lost = n - again
	if err != nil {
		return err
	}
	if extra > 0 {
		return fmt.Errorf("%d fires after the requeue's: a task requeued twice", extra)
	}
	took := last.Sub(t0).Seconds()
	x.vals["bulk_requeue"], x.vals["bulk_rate"] = took, float64(n)/took
	x.notes = append(x.notes, fmt.Sprintf("bulk: job %s at %s tasks/s; each of %d tasks fired once more", job.Job, strconv.FormatFloat(r.o.bulkRate, 'f', -1, 64), n))
	return nil
}

// deadCount is the DEAD tasks of bizType bulk, as stats says (0 if it cannot tell).
func deadCount(ctx context.Context, nc *nats.Conn) int {
	var st struct {
		BizTypes map[string]struct{ Dead int } `json:"biz_types"`
	}
	if apiJSON(ctx, nc, bridge.APIStats, nil, &st) != nil {
		return 0
	}
	return st.BizTypes["bulk"].Dead
}

// apiJSON requests subject with body as JSON and decodes the answer into out.
func apiJSON(ctx context.Context, nc *nats.Conn, subject string, body, out any) error {
	var data []byte
	if body != nil {
		data, _ = json.Marshal(body)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		return err
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		return fmt.Errorf("%s %s", code, m.Header.Get("Nats-Service-Error"))
	}
	return json.Unmarshal(m.Data, out)
}
