package integration

import (
	"testing"
	"time"

	"github.com/axbridge/axbridge/kvstore"
)

// checkSpent checks that no attempt is spent without a delivery unless a fault explains it
// (issue 24: a claim whose fire could not go out is given back, not counted). Each attempt a
// SUCCESS record counts that no observer saw fire must be matched by a fault in effect during
// the task's life, one attempt per fault at most: a fault ends at most the attempt it caught.
func checkSpent(t testing.TB, final map[string]kvstore.Task, o *observers, faults *faultLog) {
	t.Helper()
	fires := o.byTask()
	var spent, hit, unexplained int
	for id, task := range final {
		seen := map[int]bool{}
		for _, f := range fires[id] {
			seen[f.attempt] = true
		}
		var missing []int
		for a := 1; a <= task.Attempt; a++ {
			if !seen[a] {
				missing = append(missing, a)
			}
		}
		if len(missing) == 0 {
			continue
		}
		spent, hit = spent+len(missing), hit+1
		created, finished := time.UnixMilli(task.CreatedAt), time.UnixMilli(task.FinishedAt)
		if n := faults.during(created, finished); len(missing) > n {
			unexplained++
			if unexplained <= 10 {
				t.Errorf("task %s: attempts %v of %d spent without a delivery, %d faults in its life (+%s to +%s)",
					id, missing, task.Attempt, n, faults.rel(created), faults.rel(finished))
			}
		}
	}
	t.Logf("attempts spent without a delivery: %d, in %d of %d tasks; %d tasks with more than the faults in their life explain",
		spent, hit, len(final), unexplained)
}

// during counts the faults in effect at some time from from to to.
func (l *faultLog) during(from, to time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, f := range l.faults {
		if !f.start.After(to) && !f.settled.Before(from.Add(-time.Second)) {
			n++
		}
	}
	return n
}
