//go:build docker

package docker

import (
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/kvstore"
)

// receipt is one fire message as the test's consumer got it.
type receipt struct {
	attempt int
	due     time.Time // Ax-Due-At
	at      time.Time // when the consumer got it
	nak     bool      // the consumer answered -NAK
}

// fault is one injected failure: from start until the action was undone (healed), then until
// every service was healthy again (recovered).
type fault struct {
	name                     string
	start, healed, recovered time.Time
}

// recorder is the consumer's side: every receipt of every task, and which ones it refused.
type recorder struct {
	nakEvery uint32 // tasks whose id hashes to 0 mod nakEvery are refused on attempt 1

	mu       sync.Mutex
	receipts map[string][]receipt
	bad      []string // fire messages without valid Ax-* headers
}

func newRecorder(nakEvery uint32) *recorder {
	return &recorder{nakEvery: nakEvery, receipts: map[string][]receipt{}}
}

// onFire records a fire and answers it: -NAK for the chosen tasks' first attempt, +ACK otherwise.
func (r *recorder) onFire(m *nats.Msg) {
	at := time.Now()
	id := m.Header.Get("Ax-Task-Id")
	attempt, aerr := strconv.Atoi(m.Header.Get("Ax-Attempt"))
	due, derr := time.Parse(time.RFC3339Nano, m.Header.Get("Ax-Due-At"))
	if id == "" || aerr != nil || derr != nil {
		r.mu.Lock()
		r.bad = append(r.bad, fmt.Sprintf("%s %v", m.Subject, m.Header))
		r.mu.Unlock()
		_ = m.Respond([]byte("+ACK"))
		return
	}
	nak := attempt == 1 && r.refuses(id)
	r.mu.Lock()
	r.receipts[id] = append(r.receipts[id], receipt{attempt: attempt, due: due, at: at, nak: nak})
	r.mu.Unlock()
	if nak {
		_ = m.Respond([]byte("-NAK"))
		return
	}
	_ = m.Respond([]byte("+ACK"))
}

func (r *recorder) refuses(id string) bool {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return h.Sum32()%r.nakEvery == 0
}

// seen is how many of ids have at least one receipt.
func (r *recorder) seen(ids []string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, id := range ids {
		if len(r.receipts[id]) > 0 {
			n++
		}
	}
	return n
}

// verdict is what the run showed, checked against the guarantees.
type verdict struct {
	tasks, fires              int
	lost, early, sameAttempt  []string
	lowerAttempt, unexplained []string
	repeats                   map[string]int // cause (a fault's name, or "nak") → repeats
	outOfOrder                map[string]int // fault → receipts of an attempt lower than one already received
	firstLater                int            // tasks whose first receipt had attempt > 1 (an attempt that never reached the consumer)
	lateness                  []time.Duration
	faultLate                 map[string]time.Duration // fault → worst lateness of a first receipt due while it lasted
	badRecords                []string                 // WAITING past due, RUNNING past lease, not final, missing
	statuses                  map[kvstore.Status]int
}

// judge checks every accepted task's receipts and its final record. No attempt may arrive twice.
// A repeat (a receipt after the first) must be explained: by the consumer's own -NAK of the
// attempt before, or by a fault whose window (from its start to its recovery plus one lease and
// slack) holds the earlier receipt or the repeat itself. A receipt must carry a higher attempt
// than every earlier one, except inside a fault's window: a bridge cut off the network may have
// published an attempt that reaches the consumer only when the network is back, after the lease
// expired and another replica fired the next attempt (each attempt still arrives once, and the
// late one's ack is ignored by its fencing token); those are counted apart.
func (r *recorder) judge(ids []string, faults []fault, lease time.Duration, records map[string]kvstore.Entry, now time.Time) verdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := verdict{tasks: len(ids), repeats: map[string]int{}, outOfOrder: map[string]int{}, faultLate: map[string]time.Duration{}, statuses: map[kvstore.Status]int{}}
	v.unexplained = append(v.unexplained, r.bad...)
	inWindow := func(f fault, t time.Time) bool {
		return !t.Before(f.start.Add(-time.Second)) && !t.After(f.recovered.Add(lease+5*time.Second))
	}
	for _, id := range ids {
		rs := r.receipts[id]
		v.fires += len(rs)
		if len(rs) == 0 {
			v.lost = append(v.lost, id)
		} else {
			first := rs[0]
			late := first.at.Sub(first.due)
			v.lateness = append(v.lateness, late)
			if first.attempt > 1 {
				v.firstLater++
			}
			for _, f := range faults {
				if !first.due.Before(f.start) && !first.due.After(f.recovered) && late > v.faultLate[f.name] {
					v.faultLate[f.name] = late
				}
			}
		}
		attempts := map[int]bool{}
		for i, rc := range rs {
			if rc.at.UnixMilli() < rc.due.UnixMilli() {
				v.early = append(v.early, fmt.Sprintf("%s attempt %d at %s, due %s", id, rc.attempt, rc.at.Format(time.StampMilli), rc.due.Format(time.StampMilli)))
			}
			if attempts[rc.attempt] {
				v.sameAttempt = append(v.sameAttempt, fmt.Sprintf("%s attempt %d", id, rc.attempt))
			}
			attempts[rc.attempt] = true
			if i == 0 {
				continue
			}
			prev := rs[i-1]
			if highest := slices.MaxFunc(rs[:i], func(a, b receipt) int { return a.attempt - b.attempt }).attempt; rc.attempt < highest {
				// An earlier attempt arriving after a later one: a fire that sat in a cut-off
				// bridge's socket until the network came back. Allowed only inside a fault.
				what := fmt.Sprintf("%s attempt %d at %s after attempt %d", id, rc.attempt, rc.at.Format(time.StampMilli), highest)
				if f, ok := faultAt(faults, rc.at, inWindow); ok {
					v.outOfOrder[f]++
				} else {
					v.lowerAttempt = append(v.lowerAttempt, what)
				}
			}
			cause := ""
			if prev.nak {
				cause = "nak"
			} else if f, ok := faultAt(faults, prev.at, inWindow); ok {
				cause = f
			} else if f, ok := faultAt(faults, rc.at, inWindow); ok {
				cause = f
			}
			if cause == "" {
				v.unexplained = append(v.unexplained, fmt.Sprintf("%s attempt %d at %s after attempt %d at %s", id, rc.attempt, rc.at.Format(time.StampMilli), prev.attempt, prev.at.Format(time.StampMilli)))
				continue
			}
			v.repeats[cause]++
		}
		en, ok := records[id]
		if !ok {
			v.badRecords = append(v.badRecords, id+": no record")
			continue
		}
		t := en.Task
		v.statuses[t.Status]++
		switch {
		case t.Status == kvstore.StatusWaiting && t.DueAt < now.UnixMilli():
			v.badRecords = append(v.badRecords, fmt.Sprintf("%s WAITING, due %d ms ago", id, now.UnixMilli()-t.DueAt))
		case t.Status == kvstore.StatusRunning && t.LeaseUntil < now.UnixMilli():
			v.badRecords = append(v.badRecords, fmt.Sprintf("%s RUNNING, lease ended %d ms ago", id, now.UnixMilli()-t.LeaseUntil))
		case !t.Status.Final():
			v.badRecords = append(v.badRecords, fmt.Sprintf("%s still %s", id, t.Status))
		}
	}
	return v
}

// faultAt names the first fault whose window holds t.
func faultAt(faults []fault, t time.Time, inWindow func(fault, time.Time) bool) (string, bool) {
	for _, f := range faults {
		if inWindow(f, t) {
			return f.name, true
		}
	}
	return "", false
}

// quantile of sorted-in-place durations.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

func (v verdict) summary(faults []fault, t0 time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "tasks %d, fires %d, lost %d, early %d, same attempt twice %d, lower attempt after higher outside a fault %d, unexplained repeats %d, bad records %d\n",
		v.tasks, v.fires, len(v.lost), len(v.early), len(v.sameAttempt), len(v.lowerAttempt), len(v.unexplained), len(v.badRecords))
	causes := make([]string, 0, len(v.repeats))
	for c := range v.repeats {
		causes = append(causes, c)
	}
	sort.Strings(causes)
	for _, c := range causes {
		fmt.Fprintf(&b, "repeats after %s: %d\n", c, v.repeats[c])
	}
	for _, f := range faults {
		if n := v.outOfOrder[f.name]; n > 0 {
			fmt.Fprintf(&b, "an earlier attempt received after a later one, during %s: %d\n", f.name, n)
		}
	}
	fmt.Fprintf(&b, "first receipt at attempt > 1 (an earlier attempt never reached the consumer): %d\n", v.firstLater)
	fmt.Fprintf(&b, "lateness of first receipts: p50 %v, p99 %v, max %v\n", quantile(v.lateness, .5), quantile(v.lateness, .99), quantile(v.lateness, 1))
	for _, f := range faults {
		fmt.Fprintf(&b, "fault %-22s at +%5.1fs, healed +%5.1fs, healthy again +%5.1fs (%.1fs after healing); worst lateness of tasks due meanwhile %v\n",
			f.name, f.start.Sub(t0).Seconds(), f.healed.Sub(t0).Seconds(), f.recovered.Sub(t0).Seconds(), f.recovered.Sub(f.healed).Seconds(), v.faultLate[f.name])
	}
	fmt.Fprintf(&b, "final records: %v", v.statuses)
	return b.String()
}
