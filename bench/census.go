package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
)

// censusRounds is how many times each census request is timed; the table shows the slowest.
const censusRounds = 5

// measureCensus times, at M pending, the operator API's answers as a user gets them (request to
// reply): the first list page, a list that selects one task (every replica scans everything it
// holds), and the stats. Native schedules have no such API.
func (r *runner) measureCensus(ctx context.Context, nc *nats.Conn, total int, x *result) error {
	probes := []struct {
		key, subject, body string
		check              func([]byte) error
	}{
		{"census_list", bridge.APIList, `{"limit":100}`, wantTasks(100)},
		{"census_list_one", bridge.APIList, fmt.Sprintf(`{"id_prefix":"far-%d"}`, total-1), wantTasks(1)},
		{"census_stats", bridge.APIStats, ``, wantWaiting(total)},
	}
	for _, p := range probes {
		var took []float64
		for range censusRounds {
			t0 := time.Now()
			m, err := nc.RequestWithContext(ctx, p.subject, []byte(p.body))
			if err != nil {
				return fmt.Errorf("%s: %w", p.key, err)
			}
			took = append(took, float64(time.Since(t0).Microseconds())/1000)
			if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
				return fmt.Errorf("%s: %s %s", p.key, code, m.Header.Get("Nats-Service-Error"))
			}
			if err := p.check(m.Data); err != nil {
				return fmt.Errorf("%s: %w", p.key, err)
			}
		}
		x.vals[p.key] = slices.Max(took)
		x.notes = append(x.notes, fmt.Sprintf("%s: %v ms, in turn", p.key, took))
	}
	return nil
}

func wantTasks(n int) func([]byte) error {
	return func(data []byte) error {
		var page struct {
			Tasks []json.RawMessage `json:"tasks"`
		}
		if err := json.Unmarshal(data, &page); err != nil || len(page.Tasks) != n {
			return fmt.Errorf("%d tasks (%v), want %d", len(page.Tasks), err, n)
		}
		return nil
	}
}

func wantWaiting(n int) func([]byte) error {
	return func(data []byte) error {
		var st struct {
			Total struct {
				Waiting int `json:"waiting"`
			} `json:"total"`
		}
		if err := json.Unmarshal(data, &st); err != nil || st.Total.Waiting < n {
			return fmt.Errorf("%d waiting (%v), want at least %d", st.Total.Waiting, err, n)
		}
		return nil
	}
}
