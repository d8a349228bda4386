package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/kvstore"
)

type bulkAnswer struct {
	DryRun  bool   `json:"dry_run"`
	Count   int    `json:"count"`
	Sample  []any  `json:"sample"`
	Job     string `json:"job"`
	State   string `json:"state"`
	Replica string `json:"replica"`
	By      string `json:"by"`
	Matched int    `json:"matched"`
	Done    int    `json:"done"`
	Skipped int    `json:"skipped"`
	Failed  int    `json:"failed"`
}

// fireCounter terms the first fire of every task and acks the later ones, counting them all.
type fireCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *fireCounter) handle(m *nats.Msg) {
	c.mu.Lock()
	id := m.Header.Get(bridge.HeaderTaskID)
	c.n[id]++
	first := c.n[id] == 1
	c.mu.Unlock()
	if first {
		_ = m.Term()
		return
	}
	_ = m.Ack()
}

func (c *fireCounter) count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[id]
}

// A bulk requeue of DEAD tasks: refused without a filter, a dry run first that changes nothing,
// then a paced job that requeues every one once (each fires exactly once more), with its progress
// and two audit events.
func TestBulkRequeue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startBridge(bridge.Config{ReplicaID: "bulk-a"})
	e.startBridge(bridge.Config{ReplicaID: "bulk-b"})
	fc := &fireCounter{n: map[string]int{}}
	e.consume("ax.fire.pay", fc.handle)
	audits := e.consume("ax.audit.pay", nil)
	const n = 300
	for i := range n {
		e.schedule("pay", "p", bridge.HeaderTaskID, fmt.Sprintf("bulk-%03d", i), bridge.HeaderMaxRetry, "0")
	}
	for i := range n {
		e.waitStatus(fmt.Sprintf("bulk-%03d", i), kvstore.StatusDead, 20*time.Second)
	}
	for _, body := range []string{`{"action":"requeue"}`, `{"action":"requeue","filter":{}}`, `{"action":"explode","filter":{"biz_type":"pay"}}`,
		`{"action":"requeue","filter":{"biz_type":"pay"},"rate":100000}`, `{"action":"requeue","filter":{"biz_type":"pay","limit":5}}`,
		`{"action":"cancel","filter":{"biz_type":"pay"},"delay":"1m"}`, `{"action":"reschedule","filter":{"biz_type":"pay"}}`} {
		var a bulkAnswer
		if code := e.apiJSON(bridge.APIBulk, body, &a); code != "400" {
			t.Errorf("bulk %s: code %q, want 400", body, code)
		}
	}
	filter := map[string]any{"biz_type": "pay", "status": []string{"DEAD"}}
	var dry bulkAnswer
	if code := e.apiJSON(bridge.APIBulk, map[string]any{"action": "requeue", "filter": filter}, &dry); code != "" ||
		!dry.DryRun || dry.Count != n || len(dry.Sample) != 10 {
		t.Fatalf("dry run: %+v (%s); want a dry run of %d with a sample of 10", dry, code, n)
	}
	if got, _ := e.apiCall(bridge.APIGet, "bulk-000"); got.Status != "DEAD" {
		t.Fatalf("a dry run changed bulk-000: %s", got.Status)
	}
	var job bulkAnswer
	if code := e.apiJSON(bridge.APIBulk, map[string]any{"action": "requeue", "filter": filter, "dry_run": false, "rate": 500, "by": "tester"}, &job); code != "" ||
		job.Job == "" || job.State != "running" || job.Matched != n {
		t.Fatalf("start: %+v (%s)", job, code)
	}
	done := waitJob(t, e, job.Job, 60*time.Second)
	if done.Done != n || done.Skipped != 0 || done.Failed != 0 {
		t.Errorf("job: %+v; want %d done", done, n)
	}
	for i := range n {
		id := fmt.Sprintf("bulk-%03d", i)
		e.waitStatus(id, kvstore.StatusSuccess, 20*time.Second)
		if c := fc.count(id); c != 2 {
			t.Errorf("%s fired %d times, want 2 (terminated, then once after the requeue)", id, c)
		}
	}
	for _, want := range []string{"running", "done"} {
		var ev bulkAnswer
		if err := json.Unmarshal(audits.next(t, 5*time.Second).msg.Data, &ev); err != nil || ev.State != want || ev.By != "tester" || ev.Job != job.Job {
			t.Errorf("audit event: %+v (%v); want state %s by tester", ev, err, want)
		}
	}
}

// waitJob polls a job's progress until it is no longer running.
func waitJob(t *testing.T, e *env, job string, within time.Duration) bulkAnswer {
	t.Helper()
	var j bulkAnswer
	if !checkFor(within, func() bool {
		return e.apiJSON(bridge.APIBulk, map[string]any{"job": job}, &j) == "" && j.State != "running"
	}) {
		t.Fatalf("job %s still %s: %+v", job, j.State, j)
	}
	if j.State != "done" {
		t.Fatalf("job %s ended %s: %+v", job, j.State, j)
	}
	return j
}

// A job whose replica stops is resumed by the other from the page it reached: every task is
// cancelled once.
func TestBulkResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := bridge.Config{PartitionLease: time.Second}
	cfg.ReplicaID = "resume-a"
	ba := e.startBridge(cfg)
	cfg.ReplicaID = "resume-b"
	bb := e.startBridge(cfg)
	const n = 100
	for i := range n {
		e.schedule("later", "x", bridge.HeaderTaskID, fmt.Sprintf("res-%03d", i), bridge.HeaderDelay, "1h")
	}
	e.waitStatus(fmt.Sprintf("res-%03d", n-1), kvstore.StatusWaiting, 10*time.Second)
	var job bulkAnswer
	if !checkFor(10*time.Second, func() bool {
		return e.apiJSON(bridge.APIBulk, map[string]any{"action": "cancel", "filter": map[string]any{"biz_type": "later"}, "dry_run": false, "rate": 20}, &job) == "" &&
			job.Matched == n
	}) {
		t.Fatalf("start: %+v", job)
	}
	var mid bulkAnswer
	checkFor(20*time.Second, func() bool {
		return e.apiJSON(bridge.APIBulk, map[string]any{"job": job.Job}, &mid) == "" && mid.Done >= 20
	})
	runner := map[string]*bridge.Bridge{"resume-a": ba, "resume-b": bb}[job.Replica]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := runner.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	done := waitJob(t, e, job.Job, 60*time.Second)
	if done.Replica == job.Replica || done.Done != n || done.Failed != 0 {
		t.Errorf("resumed job: %+v; want %d done by the other replica than %s", done, n, job.Replica)
	}
	for i := range n {
		e.waitStatus(fmt.Sprintf("res-%03d", i), kvstore.StatusCancelled, 5*time.Second)
	}
}
