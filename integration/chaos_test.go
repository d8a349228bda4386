package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axbridge/axbridge/bridge"
)

// The chaos suite (issue 16's proof). Three bridge subprocesses on a 3-node nats-server cluster
// of subprocesses (sync_interval: always, R3 bucket and stream) take a few thousand tasks spread
// over about a minute, while a seeded fault timeline kills bridges with SIGKILL and restarts
// them, pauses one with SIGSTOP past its lease, kills and restarts a NATS node twice, and cuts the
// last bridge off NATS (a TCP proxy) for two leases. Consumers in this process ack, nak or stay
// silent by a seeded rule. Checked, from observers on every node and from the bucket: every
// accepted task fires and ends SUCCESS; none before Ax-Due-At; no attempt fires twice; every
// repeat (a fire after the consumer acked an earlier attempt) carries a higher Ax-Attempt and
// follows a fault on the replica that held it; nothing is RUNNING past its lease or WAITING past
// due at the end; revisions never go backwards (the bucket's watch, and the fencing tokens of a
// task's attempts).
//
// AX_CHAOS_SEED replays a run (the seed is logged); AX_CHAOS_LONG=30m runs the timeline for that
// long (go test -run TestChaos -timeout 40m ./integration); AX_CHAOS_FAULTS=kill9,stop keeps only
// the faults of those kinds (kill9, stop, cut, nats-kill9).
func TestChaos(t *testing.T) {
	// Not parallel, as every subprocess-cluster test: they run one by one before the parallel
	// tests start, so that nothing else competes for the two cores with their three nats-servers
	// and three bridges (a starved bridge misses the bounds they check).
	window := 50 * time.Second
	if v := os.Getenv("AX_CHAOS_LONG"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("AX_CHAOS_LONG=%q: %v", v, err)
		}
		window = d
	}
	const ackWait = 4 * time.Second
	tasks := int(window.Seconds() * 50) // 2,500 in the CI-sized run
	seed := chaosSeed(t)
	t.Logf("seed %d (AX_CHAOS_SEED=%d replays it), %d tasks over %v", seed, seed, tasks, window)
	rng := newRand(seed)

	r := newChaosRig(t, rigOptions{bridges: 3, proxied: true, seed: seed,
		rates: rates{ack: 85, nak: 10, alwaysAckFrom: 3}})
	plan := planFaults(rng, window, len(r.bridges), ackWait+r.leaseSkew)
	if kinds := os.Getenv("AX_CHAOS_FAULTS"); kinds != "" { // e.g. kill9: bridge kills alone
		plan = slices.DeleteFunc(plan, func(f plannedFault) bool { return !slices.Contains(strings.Split(kinds, ","), f.kind) })
	}
	for _, f := range plan {
		t.Logf("planned: +%v %s %d for %v", f.at.Truncate(time.Millisecond), f.kind, f.target, f.dur.Truncate(time.Millisecond))
	}

	origin := r.faults.origin
	series := publishChaosSeries(t, r.js, origin.Add(window), ackWait)
	var wg sync.WaitGroup
	published := make(map[string]time.Time, tasks) // id -> when its publish began
	var pubMu sync.Mutex
	delays := make([]time.Duration, tasks)
	for i := range delays {
		delays[i] = time.Duration(rng.Int64N(int64(4 * time.Second)))
	}
	const publishers = 4
	for w := range publishers {
		wg.Go(func() {
			for i := w; i < tasks; i += publishers {
				at := origin.Add(time.Duration(i) * window / time.Duration(tasks))
				if d := time.Until(at); d > 0 {
					<-time.After(d) // pacing the schedule, not waiting for a condition
				}
				id := "chaos-" + strconv.Itoa(i)
				pubMu.Lock()
				published[id] = time.Now()
				pubMu.Unlock()
				r.pub.publish(id, "chaos", delays[i], bridge.HeaderAckWait, ackWait.String(),
					bridge.HeaderBackoff, "200ms", bridge.HeaderMaxRetry, "10")
			}
		})
	}
	for _, f := range plan {
		wg.Go(func() {
			<-time.After(time.Until(origin.Add(f.at)))
			r.inject(f)
		})
	}
	wg.Wait()
	t.Logf("publishing and faults done at +%v; %d accepted, %d publishes failed", time.Since(origin).Truncate(time.Millisecond), len(r.pub.ids()), r.pub.failed)

	ids := r.pub.ids()
	final := settle(t, r.store, ids, 60*time.Second, r.leaseSkew)
	rep := checkFires(t, ids, r.obs, r.cons, r.faults)
	checkSpent(t, final, r.obs, r.faults)
	r.revs.logSettleLag(t, ids, r.obs, r.cons)
	checkChaosSeries(t, r, series, 60*time.Second)
	// The due time the bridge fired at is the one the task asked for: delay from the moment the
	// stream accepted it, which is after its publish began.
	for id, fs := range r.obs.byTask() {
		if !ids[id] {
			continue
		}
		i, _ := strconv.Atoi(id[len("chaos-"):])
		for _, f := range fs {
			if f.attempt == 1 && f.due.Before(published[id].Add(delays[i]).Truncate(time.Millisecond)) {
				t.Errorf("task %s: Ax-Due-At %v is before its publish + delay %v", id, f.due, published[id].Add(delays[i]))
			}
		}
	}
	r.finish(rep)
}

// plannedFault is one fault of the timeline: at is the offset from the start, dur how long the
// target stays down (killed, paused, cut).
type plannedFault struct {
	at     time.Duration
	kind   string
	target int // a bridge's index, or a NATS node's
	dur    time.Duration
}

// planFaults is the seeded timeline over window, in rounds of about 50 s: in each, a NATS node
// killed with SIGKILL and restarted twice, one bridge paused past its lease, the last bridge cut
// off NATS for two leases, and a random bridge killed with SIGKILL and restarted every few
// seconds, never one that another fault holds down at that time.
func planFaults(rng *rand.Rand, window time.Duration, bridges int, lease time.Duration) []plannedFault {
	const round = 50 * time.Second
	jitter := func(d time.Duration) time.Duration {
		return d + time.Duration(rng.Int64N(int64(4*time.Second))) - 2*time.Second
	}
	var plan []plannedFault
	for start := time.Duration(0); start+round/2 <= window; start += round {
		plan = append(plan,
			plannedFault{at: start + jitter(round/5), kind: "nats-kill9", target: rng.IntN(3), dur: 3*time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))},
			plannedFault{at: start + jitter(round*2/5), kind: "stop", target: rng.IntN(bridges - 1), dur: lease + 2*time.Second},
			plannedFault{at: start + jitter(round*3/5), kind: "nats-kill9", target: rng.IntN(3), dur: 3*time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))},
			plannedFault{at: start + jitter(round*4/5), kind: "cut", target: bridges - 1, dur: 2 * lease},
		)
	}
	busy := func(b int, from, to time.Duration) bool {
		for _, f := range plan {
			if f.kind != "nats-kill9" && f.target == b && f.at < to+2*time.Second && from < f.at+f.dur+2*time.Second {
				return true
			}
		}
		return false
	}
	for at := 3 * time.Second; at < window-2*time.Second; at += 3*time.Second + time.Duration(rng.Int64N(int64(3*time.Second))) {
		b := rng.IntN(bridges)
		dur := 300*time.Millisecond + time.Duration(rng.Int64N(int64(1200*time.Millisecond)))
		if !busy(b, at, at+dur) {
			plan = append(plan, plannedFault{at: at, kind: "kill9", target: b, dur: dur})
		}
	}
	slices.SortFunc(plan, func(a, b plannedFault) int { return int(a.at - b.at) })
	return plan
}

// inject carries out one planned fault and logs it as it happened.
func (r *chaosRig) inject(f plannedFault) {
	t := r.t
	down := func() { <-time.After(f.dur) } // how long the fault lasts, by plan
	rec := fault{kind: f.kind}
	if f.kind != "nats-kill9" {
		b := r.bridges[f.target]
		b.fault.Lock() // a restart that takes long (during an election) delays the next fault
		defer b.fault.Unlock()
	}
	switch f.kind {
	case "kill9":
		b := r.bridges[f.target]
		rec.target, rec.start = b.id, time.Now()
		b.kill9()
		down()
		if err := b.start(60 * time.Second); err != nil {
			t.Errorf("restart %s: %v\n%s", b.id, err, b.logTail(20))
		}
		rec.end = time.Now()
		rec.settled = rec.end
	case "stop":
		b := r.bridges[f.target]
		rec.target, rec.start = b.id, time.Now()
		if err := b.pause(); err != nil {
			t.Errorf("SIGSTOP %s: %v", b.id, err)
		}
		down()
		if err := b.resume(); err != nil {
			t.Errorf("SIGCONT %s: %v", b.id, err)
		}
		rec.end = time.Now()
		rec.settled = rec.end.Add(2 * time.Second) // its reconnect and buffered writes
	case "cut":
		b := r.bridges[f.target]
		rec.target, rec.start = b.id, time.Now()
		for _, p := range r.proxies {
			p.SetCut(true)
		}
		down()
		for _, p := range r.proxies {
			p.SetCut(false)
		}
		rec.end = time.Now()
		rec.settled = rec.end.Add(3 * time.Second) // its reconnect (back-off) and buffered writes
	case "nats-kill9":
		nd := r.cluster.Nodes()[f.target]
		rec.target, rec.start = nd.Name, time.Now()
		r.cluster.Kill9(nd)
		down()
		if err := r.cluster.Restart(context.Background(), nd); err != nil {
			t.Errorf("restart %s: %v", nd.Name, err)
		}
		rec.end = time.Now()
		rec.settled = rec.end.Add(5 * time.Second) // elections and catch-up after it is back
	default:
		panic(fmt.Sprintf("unknown fault %q", f.kind))
	}
	r.faults.add(rec)
}

// check reports every key whose revision went backwards in the bucket's watch.
func (w *revisionWatch) check(t testing.TB) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.backwards[:min(len(w.backwards), 10)] {
		t.Errorf("revision went backwards: %s", s)
	}
	t.Logf("bucket watch: %d updates of %d keys, %d backwards, %d delivered twice", w.updates, len(w.last), len(w.backwards), w.repeated)
}

// logSettleLag logs how long an ack waited until the bucket watch saw its task SUCCESS: the
// window in which a kill -9 of the firing replica makes the task fire again.
func (w *revisionWatch) logSettleLag(t testing.TB, ids map[string]bool, o *observers, c *consumers) {
	t.Helper()
	fires := o.byTask()
	w.mu.Lock()
	defer w.mu.Unlock()
	var lags []time.Duration
	for id := range ids {
		done := w.success[id]
		var acked time.Time
		for _, f := range fires[id] {
			if at := c.ackedAt(f.fireKey); !at.IsZero() && at.Before(done) && at.After(acked) {
				acked = at
			}
		}
		if !done.IsZero() && !acked.IsZero() {
			lags = append(lags, done.Sub(acked))
		}
	}
	if len(lags) == 0 {
		return
	}
	slices.Sort(lags)
	pct := func(q float64) time.Duration { return lags[min(len(lags)-1, int(q*float64(len(lags))))] }
	t.Logf("ack until SUCCESS in the bucket watch, %d tasks: p50 %v, p99 %v, max %v", len(lags), pct(0.5), pct(0.99), pct(1))
}
