package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axbridge/axbridge/kvstore"
)

// The checks of the chaos, node-loss and failover tests: the fault log a repeat must be
// explained by, the invariants on what the observers saw, and the end state of the bucket.

// fault is one injected fault, as it happened.
type fault struct {
	kind    string // kill9, stop, cut, nats-kill9
	target  string // a replica id, or a NATS node name
	start   time.Time
	end     time.Time // when the target was back (restarted, resumed, reconnected)
	settled time.Time // end plus the time its effects may last
}

// faultLog is the run's fault timeline, logged as it happens.
type faultLog struct {
	t      testing.TB
	origin time.Time
	mu     sync.Mutex
	faults []fault
}

func (l *faultLog) rel(at time.Time) string {
	return at.Sub(l.origin).Truncate(time.Millisecond).String()
}

func (l *faultLog) add(f fault) {
	l.mu.Lock()
	l.faults = append(l.faults, f)
	l.mu.Unlock()
	l.t.Logf("fault %-10s %-4s at +%s, back at +%s", f.kind, f.target, l.rel(f.start), l.rel(f.end))
}

func (l *faultLog) byKind() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := map[string]int{}
	for _, f := range l.faults {
		n[f.kind]++
	}
	return n
}

// explain names the fault that explains a repeat of an attempt fired by replica at first and
// fired again at again: one on that replica (on any replica, while the fire does not say which
// replica holds its ack: acks then go to a queue group of all of them), or a NATS node's loss,
// in effect at some time between the two fires.
func (l *faultLog) explain(replica string, strict bool, first, again time.Time) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// A fault on the replica itself first, then a NATS node's, then (not strict) any replica's.
	for _, pass := range []func(f fault) bool{
		func(f fault) bool { return f.target == replica },
		func(f fault) bool { return f.kind == "nats-kill9" },
		func(fault) bool { return !strict },
	} {
		for _, f := range l.faults {
			if f.start.After(again) || f.settled.Before(first.Add(-time.Second)) {
				continue
			}
			if pass(f) {
				return f.kind + " " + f.target, true
			}
		}
	}
	return "", false
}

// explainLate names the fault that explains an older attempt of replica's, decided at firedAt
// (Ax-Fired-At), reaching the consumers between first and again, after a newer attempt was acked:
// only a fire that waited on its way does that. It waits in the client's reconnect buffer
// (subjects.md, "Firing") across the firing replica's cut or a NATS node's loss (its connection
// may have been to that node), and in the process across its pause (SIGSTOP) if it was decided
// before the pause. A fire decided after a pause longer than its lease, or by a process restarted
// after a kill, came from a replica that kept firing after it lost its partition: unexplained.
func (l *faultLog) explainLate(replica string, firedAt, first, again time.Time) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.faults {
		if f.start.After(again) || f.settled.Before(first.Add(-time.Second)) {
			continue
		}
		switch {
		case f.kind == "nats-kill9", f.kind == "cut" && f.target == replica:
			return f.kind + " " + f.target, true
		case f.kind == "stop" && f.target == replica && !firedAt.IsZero() && firedAt.Before(f.start.Add(pauseLanding)):
			return f.kind + " " + f.target + " (decided before it)", true
		}
	}
	return "", false
}

// pauseLanding is how long after the test sends SIGSTOP the process may still have run.
const pauseLanding = 100 * time.Millisecond

// report is what a run's checks found.
type report struct {
	tasks, lost, early, dupAttempts, notHigher, tokensBack int
	repeats, explained                                     int
	lateOlder                                              int // older attempts delivered after a newer one was acked
	byCause                                                map[string]int
	strictRepeats                                          int // repeats whose replica came from Ax-Replica
	firstLateness                                          []time.Duration
	lateFirst                                              []lateFire // first fires over a second late
	unexplained                                            []string
	samples                                                []string // the first few explained repeats
	dupIDs                                                 []string // tasks with an attempt fired twice
}

// checkFires runs the invariants on what the observers saw of the accepted tasks: each fired;
// none early; no attempt twice; a repeat (a fire after an acked attempt) carries a higher attempt
// and follows a fault on the replica that held it; tokens grow with attempts.
func checkFires(t testing.TB, ids map[string]bool, o *observers, c *consumers, faults *faultLog) report {
	t.Helper()
	r := report{tasks: len(ids), byCause: map[string]int{}}
	fires := o.byTask()
	for id := range ids {
		fs := fires[id]
		if len(fs) == 0 {
			r.lost++
			if r.lost <= 10 {
				t.Errorf("task %s never fired", id)
			}
			continue
		}
		r.firstLateness = append(r.firstLateness, fs[0].at.Sub(fs[0].due))
		if late := fs[0].at.Sub(fs[0].due); late > time.Second {
			r.lateFirst = append(r.lateFirst, lateFire{id: id, due: fs[0].due, late: late, replica: fs[0].replica})
		}
		byAttempt := slices.Clone(fs)
		sort.Slice(byAttempt, func(i, j int) bool { return byAttempt[i].attempt < byAttempt[j].attempt })
		for i, f := range byAttempt {
			if f.copies > 1 {
				r.dupAttempts++
				r.dupIDs = append(r.dupIDs, id)
				t.Errorf("task %s attempt %d (token %s, replica %s, first at +%s) fired %d times: %s", id, f.attempt, f.token, f.replica, faults.rel(f.at), f.copies, o.arrivals(f.fireKey, faults))
			}
			if i > 0 {
				prev := byAttempt[i-1]
				a, _ := strconv.ParseUint(f.token, 10, 64)
				b, _ := strconv.ParseUint(prev.token, 10, 64)
				if f.attempt == prev.attempt || a <= b {
					r.tokensBack++
					t.Errorf("task %s: attempt %d token %s after attempt %d token %s", id, f.attempt, f.token, prev.attempt, prev.token)
				}
			}
		}
		for i, f := range fs {
			for _, e := range fs[:i] {
				ack := c.ackedAt(e.fireKey)
				if ack.IsZero() || !ack.Before(f.at) {
					continue
				}
				cause, ok := faults.explain(e.replica, e.strict, e.at, f.at)
				switch {
				case f.attempt < e.attempt:
					// An older attempt delivered after a newer one: a fire that waited in its
					// bridge's reconnect buffer (subjects.md, "Firing"). Its ack is ignored; it
					// must follow a cut or a NATS node's loss, not a fenced replica's pause.
					r.lateOlder++
					if _, ok := faults.explainLate(f.replica, f.firedAt, e.at, f.at); !ok {
						t.Errorf("task %s: attempt %d (replica %s, decided at +%s) arrived at +%s, after attempt %d (replica %s, at +%s) was acked, and no cut, NATS node loss or pause it was decided before explains it: a fenced replica fired after the new owner",
							id, f.attempt, f.replica, faults.rel(f.firedAt), faults.rel(f.at), e.attempt, e.replica, faults.rel(e.at))
					}
					continue
				case f.attempt == e.attempt:
					r.notHigher++
					t.Errorf("task %s: attempt %d fired again after it was acked", id, f.attempt)
				}
				r.repeats++ // f fired after the consumer acked e
				if f.strict {
					r.strictRepeats++
				}
				if ok {
					r.explained++
					r.byCause[strings.Fields(cause)[0]]++
					if len(r.samples) < 5 {
						r.samples = append(r.samples, fmt.Sprintf("%s attempt %d (replica %s, at +%s, acked at +%s) again as attempt %d (replica %s) at +%s, after %s",
							id, e.attempt, e.replica, faults.rel(e.at), faults.rel(ack), f.attempt, f.replica, faults.rel(f.at), cause))
					}
				} else {
					r.unexplained = append(r.unexplained, fmt.Sprintf("%s attempt %d (replica %s, at +%s, acked) again as attempt %d at +%s",
						id, e.attempt, e.replica, faults.rel(e.at), f.attempt, faults.rel(f.at)))
				}
				break
			}
		}
	}
	o.mu.Lock()
	r.early = len(o.early)
	for _, s := range o.early[:min(len(o.early), 10)] {
		t.Errorf("early fire: %s", s)
	}
	for _, s := range o.bad[:min(len(o.bad), 10)] {
		t.Errorf("unreadable fire: %s", s)
	}
	o.mu.Unlock()
	for _, s := range r.unexplained[:min(len(r.unexplained), 20)] {
		t.Errorf("repeat explained by no fault: %s", s)
	}
	return r
}

// maxRepeatRate is the bar on repeats (fires after an acked attempt) per accepted task.
const maxRepeatRate = 0.01

// assert fails the test when the repeats exceed the bar.
func (r report) assert(t testing.TB) {
	t.Helper()
	if r.tasks > 0 && float64(r.repeats) > maxRepeatRate*float64(r.tasks) {
		t.Errorf("repeats %d of %d tasks (%.2f%%), over the bar of %.0f%%", r.repeats, r.tasks, 100*float64(r.repeats)/float64(r.tasks), 100*maxRepeatRate)
	}
}

// log writes the report's figures.
func (r report) log(t testing.TB, faults *faultLog) {
	t.Helper()
	slices.Sort(r.firstLateness)
	pct := func(q float64) time.Duration {
		if len(r.firstLateness) == 0 {
			return 0
		}
		return r.firstLateness[min(len(r.firstLateness)-1, int(q*float64(len(r.firstLateness))))]
	}
	rate := 0.0
	if r.tasks > 0 {
		rate = 100 * float64(r.repeats) / float64(r.tasks)
	}
	t.Logf("tasks %d, faults %v; lost %d, early %d, attempts fired twice %d, older attempts delivered late %d",
		r.tasks, faults.byKind(), r.lost, r.early, r.dupAttempts, r.lateOlder)
	t.Logf("repeats %d (%.2f%% of tasks; bar <= 1%%), explained %d by %v, unexplained %d; attributed by Ax-Replica: %d, by reply subject (any replica's fault): %d",
		r.repeats, rate, r.explained, r.byCause, len(r.unexplained), r.strictRepeats, r.repeats-r.strictRepeats)
	t.Logf("lateness of first fires: p50 %v, p99 %v, max %v", pct(0.50), pct(0.99), pct(1))
	r.logLate(t, faults)
	for _, s := range r.samples {
		t.Logf("repeat: %s", s)
	}
}

// settle waits (within) until every accepted task's record is SUCCESS, then checks that none is
// RUNNING past its lease or WAITING past due, reading the ones still unsettled from the leader.
// It returns the SUCCESS records by id.
func settle(t testing.TB, store *kvstore.JetStore, ids map[string]bool, within time.Duration, leaseSkew time.Duration) map[string]kvstore.Task {
	t.Helper()
	left := make([]string, 0, len(ids))
	for id := range ids {
		left = append(left, id)
	}
	slices.Sort(left)
	done := make(map[string]kvstore.Task, len(ids))
	checkFor(within, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		es, err := store.GetMany(ctx, left)
		if err != nil {
			return false
		}
		for _, e := range es {
			if e.Task.Status == kvstore.StatusSuccess {
				done[e.Task.ID] = e.Task
			}
		}
		left = slices.DeleteFunc(left, func(id string) bool { _, ok := done[id]; return ok })
		return len(left) == 0
	})
	now := time.Now().UnixMilli()
	for _, id := range left[:min(len(left), 20)] {
		e, err := store.Get(context.Background(), id)
		switch {
		case err != nil:
			t.Errorf("task %s: %v", id, err)
		case e.Task.Status == kvstore.StatusRunning && e.Task.LeaseUntil+leaseSkew.Milliseconds() < now:
			t.Errorf("task %s RUNNING %v past its lease (owner %s, attempt %d)", id, time.Duration(now-e.Task.LeaseUntil)*time.Millisecond, e.Task.Owner, e.Task.Attempt)
		case e.Task.Status == kvstore.StatusWaiting && e.Task.DueAt < now:
			t.Errorf("task %s WAITING %v past due (attempt %d)", id, time.Duration(now-e.Task.DueAt)*time.Millisecond, e.Task.Attempt)
		default:
			t.Errorf("task %s not settled within %v: %s, attempt %d", id, within, e.Task.Status, e.Task.Attempt)
		}
	}
	if len(left) > 0 {
		t.Errorf("%d of %d tasks not SUCCESS at the end", len(left), len(ids))
	}
	return done
}

// chaosSeed is AX_CHAOS_SEED, or the time; the test logs it so a failure can be replayed.
func chaosSeed(t testing.TB) uint64 {
	if s := envInt("AX_CHAOS_SEED", 0); s != 0 {
		return uint64(s)
	}
	return uint64(time.Now().UnixNano())
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

// durSpread is "p50 … p90 … p99 … max …" of ds (sorted here), or "none".
func durSpread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	slices.Sort(ds)
	q := func(p float64) time.Duration {
		return ds[min(len(ds)-1, int(p*float64(len(ds))))].Truncate(time.Millisecond)
	}
	return fmt.Sprintf("min %v, p50 %v, p90 %v, p99 %v, max %v", ds[0].Truncate(time.Millisecond), q(0.5), q(0.9), q(0.99), ds[len(ds)-1].Truncate(time.Millisecond))
}

// spreadOf is "min … median … max …" of the sorted vs, each written by f, or "none".
func spreadOf[T any](vs []T, f func(T) string) string {
	if len(vs) == 0 {
		return "none"
	}
	return fmt.Sprintf("min %s, median %s, max %s", f(vs[0]), f(vs[len(vs)/2]), f(vs[len(vs)-1]))
}

func fmtPct(v float64) string { return fmt.Sprintf("%.0f%%", 100*v) }

// lateFire is a first fire that came over a second after its due time.
type lateFire struct {
	id      string
	due     time.Time
	late    time.Duration
	replica string
}

// logLate writes, for each 30 s of due times with first fires over a second late, how many and
// the latest, with the faults around it: where lateness comes from (a diagnosis, not a check).
func (r report) logLate(t testing.TB, faults *faultLog) {
	t.Helper()
	if len(r.lateFirst) == 0 {
		return
	}
	slices.SortFunc(r.lateFirst, func(a, b lateFire) int { return a.due.Compare(b.due) })
	origin := faults.origin
	const window = 30 * time.Second
	for i := 0; i < len(r.lateFirst); {
		w := r.lateFirst[i].due.Sub(origin).Truncate(window)
		worst, n, byReplica := r.lateFirst[i], 0, map[string]int{}
		for ; i < len(r.lateFirst) && r.lateFirst[i].due.Sub(origin).Truncate(window) == w; i++ {
			f := r.lateFirst[i]
			n++
			byReplica[f.replica]++
			if f.late > worst.late {
				worst = f
			}
		}
		t.Logf("late first fires due in +%v..+%v: %d over 1s, by firing replica %v; latest %s due +%v, %v late",
			w, w+window, n, byReplica, worst.id, worst.due.Sub(origin).Truncate(time.Millisecond), worst.late.Truncate(time.Millisecond))
	}
}
