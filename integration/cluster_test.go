package integration

import (
	"testing"
	"time"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// On a 3-node cluster with an R3 bucket and stream, two bridges connected to different nodes
// fire every task exactly once (no lease expired, so no repeats).
func TestClusterR3TwoBridges(t *testing.T) {
	t.Parallel()
	c := natstest.RunCluster(t, 3)
	e := newEnvOn(t, c.ClientURLs(), kvstore.Config{Replicas: 3})
	for i, id := range []string{"east", "west"} {
		e.startBridgeOn(c.Servers[i].ClientURL(), kvstore.Config{Replicas: 3}, bridge.Config{ReplicaID: id, StreamReplicas: 3})
	}
	log := e.ackAndLog("ax.fire.r3")
	// Every node must know about the consumer before the first fire, or NATS answers that fire
	// with no-responders and it is retried (correctly, but the test counts repeats).
	if !checkFor(10*time.Second, func() bool {
		for _, s := range c.Servers {
			if !s.NATS().GlobalAccount().SubscriptionInterest("ax.fire.r3") {
				return false
			}
		}
		return true
	}) {
		t.Fatal("consumer interest did not reach every node")
	}
	ids := e.scheduleSpread("r3", 200, 2*time.Second)
	e.waitAll(ids, kvstore.StatusSuccess, 30*time.Second)
	if repeats := log.check(t, ids); repeats != 0 {
		t.Errorf("%d repeated fires on the R3 cluster with prompt acks", repeats)
	}
}
