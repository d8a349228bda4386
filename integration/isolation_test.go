package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/kvstore"
)

// A burst of one bizType does not hold back another's fires (issue 25, isolation): 5,000 reports
// tasks due at one instant and 5 orders tasks due a millisecond later. Taken in deadline order,
// the orders would go out after every report; the bridge takes due fires from the bizTypes'
// lanes in turn, so they go out behind at most the claims out when they came due (the claim
// budget, 1,024), well within the first half. Claim ahead is off: claims held for their due time
// go out at it, rightly before the orders due later, and how many get claimed ahead depends on
// the machine's speed, not on the order of the lanes.
func TestBurstDoesNotHoldBackAnotherBizType(t *testing.T) {
	e := newEnv(t)
	e.startBridge(bridge.Config{ClaimAhead: -1})
	const burst, orders = 5000, 5
	var mu sync.Mutex
	var seq []string // the bizType of each fire, in the order they arrived
	done := make(chan struct{})
	sub, err := e.nc.Subscribe(bridge.FirePrefix+">", func(m *nats.Msg) {
		_ = m.Ack()
		mu.Lock()
		defer mu.Unlock()
		seq = append(seq, strings.TrimPrefix(m.Subject, bridge.FirePrefix))
		if len(seq) == burst+orders {
			close(done)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	now := time.Now()
	due := now.Add(3 * time.Second).UnixMilli()
	var wg sync.WaitGroup
	create := func(id, biz string, due int64) {
		wg.Add(1)
		e.store.CreateAsync(context.Background(), &kvstore.Task{ID: id, BizType: biz, Payload: []byte("x"),
			Status: kvstore.StatusWaiting, DueAt: due, MaxRetry: 3, AckWait: 30 * time.Second,
			CreatedAt: now.UnixMilli(), UpdatedAt: now.UnixMilli()}, func(_ kvstore.Entry, err error) {
			defer wg.Done()
			if err != nil {
				t.Errorf("store %s: %v", id, err)
			}
		})
	}
	for i := range burst {
		create(fmt.Sprintf("report-%d", i), "reports", due)
	}
	for i := range orders {
		create(fmt.Sprintf("order-%d", i), "orders", due+1)
	}
	wg.Wait()
	t.Logf("%d records stored %v before their due time", burst+orders, time.Until(time.UnixMilli(due)).Truncate(time.Millisecond))
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		mu.Lock()
		t.Fatalf("%d of %d fired within 2m", len(seq), burst+orders)
	}
	mu.Lock()
	defer mu.Unlock()
	var at []int
	for i, biz := range seq {
		if biz == "orders" {
			at = append(at, i+1)
		}
	}
	t.Logf("the orders fires were fires %v of %d", at, len(seq))
	if len(at) != orders || at[len(at)-1] > burst/2 {
		t.Errorf("orders fired at %v of %d fires; want all %d within the first %d", at, len(seq), orders, burst/2)
	}
}
