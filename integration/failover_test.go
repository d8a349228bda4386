package integration

import (
	"slices"
	"testing"
	"time"

	"github.com/axbridge/axbridge/kvstore"
)

// Failover (issue 16's bar): 3 bridge subprocesses on the subprocess cluster, tasks due evenly
// over 16 s, one bridge killed with SIGKILL a third of the way in and not restarted. Asserted:
// every task fires and ends SUCCESS, none early, no attempt twice, repeats higher, after the kill
// and within the bar, no repair; every task of the partitions the victim fired fires by its due
// time or a partition lease after the kill, whichever is later, plus a second. Logged: how far the partitions were divided before the kill (the share of each
// partition's fires that came from the replica that fired most of it: 1.0 when replicas own
// partitions, about 1/3 while all race for all), then, for the partitions the killed replica
// fired most of, the time from the kill to their first fire after it and the lateness of their
// tasks due after the kill; and for its attempts in flight (fired, not yet settled), the time from
// the kill to their next attempt.
func TestFailoverKill9(t *testing.T) {
	// Not parallel, as every subprocess-cluster test: they run one by one before the parallel
	// tests start, so that nothing else competes for the two cores with their three nats-servers
	// and three bridges (a starved bridge misses the bounds they check).
	seed := chaosSeed(t)
	r := newChaosRig(t, rigOptions{bridges: 3, seed: seed, rates: rates{ack: 100, alwaysAckFrom: 1}})
	const n, over = 2000, 16 * time.Second
	first, ids := r.spreadFromSoon("failover", n, over)
	<-time.After(time.Until(first.Add(over / 3))) // the kill falls a third into the window, by design
	victim := r.bridges[seed%uint64(len(r.bridges))]
	killed := time.Now()
	victim.kill9()
	r.faults.add(fault{kind: "kill9", target: victim.id, start: killed, end: killed, settled: killed})

	final := settle(t, r.store, ids, 60*time.Second, r.leaseSkew)
	rep := checkFires(t, ids, r.obs, r.cons, r.faults)
	checkSpent(t, final, r.obs, r.faults)
	defer r.finish(rep) // after the hand-off's checks: on a failure, with the bridges' logs

	parts := r.store.Partitions()
	fires := r.obs.byTask()
	// Before the kill: who fired each partition's tasks.
	byPart := make([]map[string]int, parts)
	for i := range byPart {
		byPart[i] = map[string]int{}
	}
	for _, fs := range fires {
		for _, f := range fs {
			if f.at.Before(killed) {
				byPart[kvstore.Partition(f.id, parts)][f.replica]++
			}
		}
	}
	var shares []float64
	victimParts := map[int]bool{}
	for p, m := range byPart {
		total, top, topReplica := 0, 0, ""
		for rep, c := range m {
			total += c
			if c > top {
				top, topReplica = c, rep
			}
		}
		if total > 0 {
			shares = append(shares, float64(top)/float64(total))
		}
		if topReplica == victim.id {
			victimParts[p] = true
		}
	}
	slices.Sort(shares)
	var refire, lateness, inflight []time.Duration
	lateHandoff := 0
	firstAfter := map[int]time.Time{}
	for id, fs := range fires {
		p := kvstore.Partition(id, parts)
		for i, f := range fs {
			if f.at.Before(killed) {
				// An attempt of the victim's in flight at the kill: fired, not acked before it.
				if f.replica == victim.id && i+1 < len(fs) {
					if ack := r.cons.ackedAt(f.fireKey); ack.IsZero() || ack.After(killed.Add(-50*time.Millisecond)) {
						inflight = append(inflight, fs[i+1].at.Sub(killed))
					}
				}
				continue
			}
			if victimParts[p] {
				if a, ok := firstAfter[p]; !ok || f.at.Before(a) {
					firstAfter[p] = f.at
				}
				if i == 0 && f.due.After(killed) {
					lateness = append(lateness, f.at.Sub(f.due))
				}
				// The hand-off: the survivors take the victim's partitions within a partition
				// lease of the kill (its last heartbeat came before it) and fire what is due
				// there by then, and later tasks at their due time, each within a second.
				if i == 0 {
					if by := maxTime(f.due, killed.Add(rigPartitionLease)).Add(handoffSlack); f.at.After(by) {
						lateHandoff++
						if lateHandoff <= 10 {
							t.Errorf("task %s of partition %d (the victim's), due at +%s, first fired at +%s: %v after the hand-off bound max(due, kill + lease %v) + %v",
								id, p, r.faults.rel(f.due), r.faults.rel(f.at), f.at.Sub(by).Truncate(time.Millisecond), rigPartitionLease, handoffSlack)
						}
					}
				}
			}
		}
	}
	for _, at := range firstAfter {
		refire = append(refire, at.Sub(killed))
	}
	t.Logf("killed %s at +%s; %d partitions; before the kill each partition's top replica fired %s of it",
		victim.id, r.faults.rel(killed), parts, spreadOf(shares, func(v float64) string { return fmtPct(v) }))
	t.Logf("partitions the victim fired most of: %d; kill -> their first fire after it: %s", len(victimParts), durSpread(refire))
	t.Logf("lateness of their first fires due after the kill (%d tasks): %s", len(lateness), durSpread(lateness))
	t.Logf("the victim's attempts in flight at the kill (%d): kill -> next attempt: %s", len(inflight), durSpread(inflight))
	if len(victimParts) == 0 || len(lateness) == 0 {
		t.Errorf("the hand-off was not exercised: %d partitions fired mostly by the victim, %d of their tasks due after the kill", len(victimParts), len(lateness))
	}
	if lateHandoff > 0 {
		t.Errorf("%d tasks of the victim's partitions fired past the hand-off bound", lateHandoff)
	}
}

// handoffSlack is how long after a partition's hand-off (a lease after its owner died) or after
// a task's due time, whichever is later, the task must have fired: loose, a bound that catches a
// lost timer or a gain that waits for something, not a measure of lateness.
const handoffSlack = time.Second

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
