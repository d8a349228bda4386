package integration

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/internal/procs"
	"github.com/axbridge/axbridge/kvstore"
)

// chaosRig is a 3-node nats-server cluster of subprocesses (sync_interval: always) with an R3
// bucket and stream, bridge subprocesses on it, and the test's own observers, consumers, bucket
// watch and task store. With proxied, the last bridge reaches NATS only through cut proxies, one
// per node.
type chaosRig struct {
	t         testing.TB
	cluster   *procs.Cluster
	bridges   []*bridgeProc
	proxies   []*natstest.CutProxy // the last bridge's way to NATS, when proxied
	obs       *observers
	cons      *consumers
	revs      *revisionWatch
	pub       *publisher
	store     *kvstore.JetStore
	js        jetstream.JetStream // on the test's own connection, all nodes
	faults    *faultLog
	seed      uint64
	leaseSkew time.Duration
}

// rigPartitions is the bucket's partition count, given to the bridges and the test's own store
// alike (so that they agree whatever default either has): 60 divides among 3 replicas evenly.
const rigPartitions = 60

// rigPartitionLease is the bridges' --partition-lease, given explicitly so that the hand-off bound
// the tests check stays the one the bridges run with.
const rigPartitionLease = 5 * time.Second

type rigOptions struct {
	bridges  int
	proxied  bool
	rates    rates
	seed     uint64
	extraArg []string // more bridge flags
}

func newChaosRig(t *testing.T, o rigOptions) *chaosRig {
	t.Helper()
	bin := buildBridge(t)
	c := startProcCluster(t, 3, true)
	r := &chaosRig{t: t, cluster: c, seed: o.seed, leaseSkew: time.Second, faults: &faultLog{t: t}}
	var urls []string
	for _, nd := range c.Nodes() {
		urls = append(urls, nd.URL())
	}
	for i := range o.bridges {
		url := c.URL()
		if o.proxied && i == o.bridges-1 {
			var purls []string
			for _, nd := range c.Nodes() {
				p := natstest.NewCutProxy(t, "127.0.0.1:"+strconv.Itoa(nd.ClientPort))
				r.proxies = append(r.proxies, p)
				purls = append(purls, p.URL())
			}
			url = strings.Join(purls, ",")
		}
		args := append([]string{"--replicas", "3", "--partitions", strconv.Itoa(rigPartitions), "--partition-lease", rigPartitionLease.String(), "--lease-skew", r.leaseSkew.String()}, o.extraArg...)
		if lvl := os.Getenv("AX_CHAOS_LOG_LEVEL"); lvl != "" {
			args = append(args, "--log-level", lvl)
		}
		p := newBridgeProc(t, bin, "b"+strconv.Itoa(i), url, args...)
		if err := p.start(60 * time.Second); err != nil { // one by one: the first creates the bucket and stream
			t.Fatalf("%v\n%s", err, p.logTail(20))
		}
		r.bridges = append(r.bridges, p)
	}
	_, r.js, r.store = openStore(t, c.URL(), kvstore.Config{Replicas: 3, Partitions: rigPartitions})
	r.obs = observe(t, urls)
	r.cons = consume(t, []string{c.URL(), strings.Join([]string{urls[2], urls[1], urls[0]}, ",")}, o.seed, o.rates)
	r.revs = watchRevisions(t, c.URL())
	r.pub = newPublisher(t, c.URL())
	r.waitInterest()
	r.faults.origin = time.Now()
	t.Logf("the fault log's +0 is %s (the bridges' logs are in UTC)", r.faults.origin.UTC().Format(time.RFC3339Nano))
	return r
}

// waitInterest waits until every node knows of the consumers' queue group, or a fire meets no
// responders (and is retried, correctly, but late).
func (r *chaosRig) waitInterest() {
	r.t.Helper()
	for _, nd := range r.cluster.Nodes() {
		nc := natstest.Connect(r.t, nd.URL())
		ok := checkFor(20*time.Second, func() bool {
			_, err := nc.Request(probeSubject, nil, time.Second)
			return err == nil // a consumer answered: the queue group's interest reached this node
		})
		nc.Close()
		if !ok {
			r.t.Fatalf("the consumers' interest did not reach %s", nd.Name)
		}
	}
}

// finish runs the checks every fault run ends with, once its tasks have settled and rep was
// checked: revisions never went backwards, the repeats are within the bar, the bridges repaired
// nothing and reported no race or panic; then it logs the figures, and the bridges' logs on a
// failure.
func (r *chaosRig) finish(rep report) {
	t := r.t
	t.Helper()
	r.revs.check(t)
	rep.assert(t)
	checkBridges(t, r.bridges)
	rep.log(t, r.faults)
	if t.Failed() {
		r.logBridges(rep.dupIDs...)
	}
	if dir := os.Getenv("AX_CHAOS_KEEP_LOGS"); dir != "" {
		for _, b := range r.bridges {
			if data, err := os.ReadFile(b.logPath); err == nil {
				_ = os.WriteFile(filepath.Join(dir, b.id+".log"), data, 0o644)
			}
		}
	}
}

// (AX_CHAOS_KEEP_LOGS=dir copies every bridge's whole log into dir.)

// logBridges writes the tail of every bridge's log, and its lines about the tasks ids (after a
// failure). AX_CHAOS_LOG_LEVEL=debug makes the bridges say more.
func (r *chaosRig) logBridges(ids ...string) {
	for _, b := range r.bridges {
		r.t.Logf("bridge %s log tail:\n%s", b.id, b.logTail(15))
		for _, id := range ids[:min(len(ids), 3)] {
			r.t.Logf("bridge %s log on %s:\n%s", b.id, id, b.logGrep(`"`+id+`"`, 20))
		}
	}
}

// spreadFromSoon publishes n tasks of biz due evenly over over, the first in 8 s, each with a 5 s
// ack wait, a 200 ms backoff and 10 retries; it fails the test unless all n are accepted.
func (r *chaosRig) spreadFromSoon(biz string, n int, over time.Duration) (first time.Time, ids map[string]bool) {
	r.t.Helper()
	first = time.Now().Add(8 * time.Second).Truncate(time.Millisecond)
	r.pub.publishSpread(biz, n, first, over, "Ax-Ack-Wait", "5s", "Ax-Backoff", "200ms", "Ax-Max-Retry", "10")
	ids = r.pub.ids()
	r.t.Logf("published %d tasks; the first is due in %v", len(ids), time.Until(first).Truncate(time.Millisecond))
	if len(ids) != n {
		r.t.Fatalf("%d of %d schedules accepted", len(ids), n)
	}
	return first, ids
}
