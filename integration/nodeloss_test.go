package integration

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/kvstore"
)

// NATS node loss (issue 16's bar): on the 3-node subprocess cluster (sync_interval: always, R3),
// with 3 bridge subprocesses and tasks due evenly over 20 s, the node that leads the bucket's
// stream is killed with SIGKILL and restarted 5 s later. Asserted: every task fires and ends
// SUCCESS, none early, no attempt twice, every repeat higher and after the fault, nothing stuck.
// Logged: lost, repeats, the pause in first fires around the kill against the time the new
// leader took to be elected, and how long after the election fires resumed.
func TestNATSLeaderLoss(t *testing.T) {
	// Not parallel, as every subprocess-cluster test: they run one by one before the parallel
	// tests start, so that nothing else competes for the two cores with their three nats-servers
	// and three bridges (a starved bridge misses the bounds they check).
	seed := chaosSeed(t)
	r := newChaosRig(t, rigOptions{bridges: 3, seed: seed, rates: rates{ack: 100, alwaysAckFrom: 1}})
	const n, over = 3000, 20 * time.Second
	first, ids := r.spreadFromSoon("loss", n, over)

	stream := "KV_" + kvstore.DefaultBucket
	<-time.After(time.Until(first.Add(over / 3))) // the kill falls a third into the window, by design
	leader := streamLeaderName(t, r.js, stream)
	nd := r.cluster.Node(leader)
	if nd == nil {
		t.Fatalf("stream leader %q is not one of the cluster's nodes", leader)
	}
	killed := time.Now()
	r.cluster.Kill9(nd)
	var elected time.Time
	if checkFor(30*time.Second, func() bool {
		l := streamLeaderNameNow(r.js, stream)
		return l != "" && l != leader
	}) {
		elected = time.Now()
	} else {
		t.Errorf("no new leader for %s within 30s of killing %s", stream, leader)
	}
	<-time.After(time.Until(killed.Add(5 * time.Second))) // the node stays down 5 s, by design
	if err := r.cluster.Restart(context.Background(), nd); err != nil {
		t.Fatal(err)
	}
	r.faults.add(fault{kind: "nats-kill9", target: leader, start: killed, end: time.Now(), settled: time.Now().Add(5 * time.Second)})

	final := settle(t, r.store, ids, 60*time.Second, r.leaseSkew)
	rep := checkFires(t, ids, r.obs, r.cons, r.faults)
	checkSpent(t, final, r.obs, r.faults)
	r.finish(rep)
	gapFrom, gapTo := firstFireGap(r.obs, ids, killed.Add(-time.Second), killed.Add(30*time.Second))
	// The election time is when stream info first named another leader: an upper bound, as the
	// info request itself waits for the new leader and for a loaded machine.
	t.Logf("leader %s killed at +%s; stream info names a new leader after %v; longest pause in first fires %v (from +%s to +%s); fires resumed %v after stream info named the new leader",
		leader, r.faults.rel(killed), elected.Sub(killed).Truncate(time.Millisecond), gapTo.Sub(gapFrom).Truncate(time.Millisecond),
		r.faults.rel(gapFrom), r.faults.rel(gapTo), gapTo.Sub(elected).Truncate(time.Millisecond))
}

// streamLeaderName waits until the stream has a leader and returns its server name.
func streamLeaderName(t testing.TB, js jetstream.JetStream, stream string) string {
	t.Helper()
	var l string
	if !checkFor(20*time.Second, func() bool {
		l = streamLeaderNameNow(js, stream)
		return l != ""
	}) {
		t.Fatalf("no leader for %s within 20s", stream)
	}
	return l
}

// streamLeaderNameNow is the server name of the stream's leader by its stream info, or "".
func streamLeaderNameNow(js jetstream.JetStream, stream string) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return ""
	}
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Leader
}

// firstFireGap is the longest gap between consecutive first fires of the tasks, among those
// received between from and to: where firing paused.
func firstFireGap(o *observers, ids map[string]bool, from, to time.Time) (time.Time, time.Time) {
	var ats []time.Time
	for id, fs := range o.byTask() {
		if ids[id] && len(fs) > 0 {
			ats = append(ats, fs[0].at)
		}
	}
	slices.SortFunc(ats, func(a, b time.Time) int { return a.Compare(b) })
	var gapFrom, gapTo time.Time
	for i := 1; i < len(ats); i++ {
		if ats[i].Before(from) || ats[i-1].After(to) {
			continue
		}
		if ats[i].Sub(ats[i-1]) > gapTo.Sub(gapFrom) {
			gapFrom, gapTo = ats[i-1], ats[i]
		}
	}
	return gapFrom, gapTo
}
