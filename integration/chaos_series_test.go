package integration

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/kvstore"
)

// Series under chaos (issue 25): beside its one-shot tasks, TestChaos runs a few Ax-Every: 1s
// series until the end of its timeline, answered by the same consumers. Their fires are not among
// the one-shot tasks' checks; checkChaosSeries holds them to a series' own promise: no occurrence
// fires twice at one attempt (one claim, one copy), none early (the observers' early list), and
// each series goes on through the faults and ends SUCCESS.

const chaosSeriesN = 4

// publishChaosSeries schedules the series, through the test's own connection (they are not the
// publisher's one-shot tasks), each ending at until.
func publishChaosSeries(t *testing.T, js jetstream.JetStream, until time.Time, ackWait time.Duration) []string {
	t.Helper()
	var ids []string
	for k := range chaosSeriesN {
		id := "chaos-series-" + strconv.Itoa(k)
		m := nats.NewMsg(bridge.SchedulePrefix + "chaos")
		m.Data = []byte(id)
		for _, kv := range [][2]string{{bridge.HeaderTaskID, id}, {bridge.HeaderEvery, "1s"}, {bridge.HeaderDelay, "1s"},
			{bridge.HeaderUntil, until.UTC().Format(time.RFC3339)}, {bridge.HeaderAckWait, ackWait.String()},
			{bridge.HeaderBackoff, "200ms"}, {bridge.HeaderMaxRetry, "10"}} {
			m.Header.Set(kv[0], kv[1])
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := js.PublishMsg(ctx, m, jetstream.WithRetryAttempts(200), jetstream.WithRetryWait(50*time.Millisecond))
		cancel()
		if err != nil {
			t.Fatalf("schedule series %s: %v", id, err)
		}
		ids = append(ids, id)
	}
	return ids
}

// checkChaosSeries waits for each series to end, then checks its fires.
func checkChaosSeries(t *testing.T, r *chaosRig, ids []string, within time.Duration) {
	t.Helper()
	for _, id := range ids {
		var e kvstore.Entry
		var err error
		if !checkFor(within, func() bool {
			e, err = r.store.Get(context.Background(), id)
			return err == nil && e.Task.Status.Final()
		}) || e.Task.Status != kvstore.StatusSuccess {
			t.Errorf("series %s: %s (err %v), want SUCCESS once its Ax-Until passed", id, e.Task.Status, err)
		}
	}
	fires := r.obs.byTask()
	for _, id := range ids {
		seen := map[[2]int]fireSeen{}
		runs := map[int]bool{}
		for _, f := range fires[id] {
			k := [2]int{f.run, f.attempt}
			if p, ok := seen[k]; ok {
				t.Errorf("series %s run %d attempt %d fired twice: tokens %s and %s (+%s, +%s)", id, f.run, f.attempt,
					p.token, f.token, r.faults.rel(p.at), r.faults.rel(f.at))
			}
			if f.copies > 1 {
				t.Errorf("series %s run %d attempt %d: %d copies", id, f.run, f.attempt, f.copies)
			}
			if f.run < 1 {
				t.Errorf("series %s: a fire without Ax-Run", id)
			}
			seen[k], runs[f.run] = f, true
		}
		if len(runs) < 5 {
			t.Errorf("series %s: %d occurrences fired, want the series to go on through the faults", id, len(runs))
		}
		t.Logf("series %s: %d occurrences, %d fires", id, len(runs), len(fires[id]))
	}
}
