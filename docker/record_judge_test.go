//go:build docker

package docker

import (
	"testing"
	"time"

	"github.com/axbridge/axbridge/kvstore"
)

// The compose test's checker flags each broken guarantee: a lost task, an early fire, the same
// attempt twice, a lower attempt after a higher one outside a fault, a repeat no fault or nak
// explains, and records left WAITING past due or RUNNING past their lease; and it attributes
// explained repeats and a late earlier attempt to their fault.
// (No Docker needed: it checks the checker.)
func TestJudgeFlagsBrokenGuarantees(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return base.Add(time.Duration(s * float64(time.Second))) }
	lease := 6 * time.Second
	faults := []fault{{name: "stop nats-1", start: at(100), healed: at(110), recovered: at(115)}}
	r := newRecorder(20)
	r.receipts = map[string][]receipt{
		"ok":          {{attempt: 1, due: at(1), at: at(1.01)}},
		"naked":       {{attempt: 1, due: at(1), at: at(1.01), nak: true}, {attempt: 2, due: at(2), at: at(2.01)}},
		"by-fault":    {{attempt: 1, due: at(99), at: at(99.5)}, {attempt: 2, due: at(106), at: at(106)}},
		"early":       {{attempt: 1, due: at(5), at: at(4.9)}},
		"twice":       {{attempt: 1, due: at(1), at: at(1)}, {attempt: 1, due: at(1), at: at(100.5)}},
		"late":        {{attempt: 2, due: at(101), at: at(101)}, {attempt: 1, due: at(100), at: at(102)}},
		"lower":       {{attempt: 2, due: at(1), at: at(1)}, {attempt: 1, due: at(1), at: at(1.5)}},
		"unexplained": {{attempt: 1, due: at(1), at: at(1)}, {attempt: 2, due: at(10), at: at(10)}},
	}
	now := at(200)
	final := func(id string) kvstore.Entry {
		return kvstore.Entry{Task: kvstore.Task{ID: id, Status: kvstore.StatusSuccess}}
	}
	records := map[string]kvstore.Entry{}
	for id := range r.receipts {
		records[id] = final(id)
	}
	records["waiting"] = kvstore.Entry{Task: kvstore.Task{ID: "waiting", Status: kvstore.StatusWaiting, DueAt: at(150).UnixMilli()}}
	records["running"] = kvstore.Entry{Task: kvstore.Task{ID: "running", Status: kvstore.StatusRunning, LeaseUntil: at(190).UnixMilli()}}
	ids := []string{"ok", "naked", "by-fault", "early", "twice", "late", "lower", "unexplained", "waiting", "running", "lost"}

	v := r.judge(ids, faults, lease, records, now)
	check := func(what string, got []string, want ...string) {
		t.Helper()
		if len(got) != len(want) {
			t.Errorf("%s: %q, want %d naming %q", what, got, len(want), want)
			return
		}
		for i := range want {
			if len(got[i]) < len(want[i]) || got[i][:len(want[i])] != want[i] {
				t.Errorf("%s: %q, want one naming %q", what, got, want)
			}
		}
	}
	check("lost", v.lost, "waiting", "running", "lost")
	check("early", v.early, "early")
	check("same attempt", v.sameAttempt, "twice")
	check("lower attempt outside a fault", v.lowerAttempt, "lower")
	check("unexplained", v.unexplained, "lower", "unexplained")
	check("bad records", v.badRecords, "waiting WAITING", "running RUNNING", "lost: no record")
	if v.repeats["nak"] != 1 || v.repeats["stop nats-1"] != 3 {
		t.Errorf("repeats by cause %v, want 1 after nak and 3 in the fault's window (by-fault, twice, late)", v.repeats)
	}
	if v.outOfOrder["stop nats-1"] != 1 || len(v.outOfOrder) != 1 {
		t.Errorf("out of order %v, want 1 (late) during the fault", v.outOfOrder)
	}
}
