package bridge

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axbridge/axbridge/kvstore"
)

// flakyMembers fails this replica's heartbeats while cut is set, as if it were cut off NATS.
type flakyMembers struct {
	Membership
	cut atomic.Bool
}

func (f *flakyMembers) Heartbeat(ctx context.Context, replica string, value []byte, ttl time.Duration) error {
	if f.cut.Load() {
		return errors.New("cut off")
	}
	return f.Membership.Heartbeat(ctx, replica, value, ttl)
}

// A replica whose heartbeats fail gives up every partition within its lease and claims and fires
// nothing after that, while the other takes everything over; in each partition, the fenced
// replica's last fire comes before the new owner's first (tasks fall due all through the cut);
// once its heartbeats are confirmed again it takes its share back.
func TestSelfFencing(t *testing.T) {
	t.Parallel()
	e := newPartEnv(t, 60, time.Second)
	flaky := &flakyMembers{}
	a := e.start("sa", func(m Membership) Membership { flaky.Membership = m; return flaky })
	b := e.start("sb", nil)
	e.stable(a, b)
	// 240 tasks due every 10 ms from 0.4 s before the cut to 2 s after it: through the fence (at
	// most a lease) and the hand-off.
	through := e.idsIn("through", 240, func(int) bool { return true })
	cutAt := time.Now().Add(time.Second)
	for i, id := range through {
		e.create([]string{id}, cutAt.Add(-400*time.Millisecond+time.Duration(i)*10*time.Millisecond).UnixMilli())
	}
	<-time.After(time.Until(cutAt)) // the cut falls among the due times, by design
	flaky.cut.Store(true)
	cut := time.Now()
	if !checkFor(5*time.Second, func() bool { return len(a.owned()) == 0 && len(b.owned()) == e.n }) {
		t.Fatalf("after its heartbeats failed, sa owns %d partitions and sb %d", len(a.owned()), len(b.owned()))
	}
	fenced := time.Since(cut)
	e.settled(through, 15*time.Second)
	handedOff(t, e, through, cut)
	if o := a.b.own.Load(); o.n != 0 && time.Now().Before(o.until) {
		t.Fatalf("sa still counts itself owner of %d partitions", o.n)
	}
	ids := e.idsIn("fence", 60, func(int) bool { return true })
	e.create(ids, time.Now().UnixMilli())
	e.settled(ids, 15*time.Second)
	if by := e.once(ids); by["sa"] != 0 || by["sb"] != len(ids) {
		t.Errorf("while sa is cut off, fires by replica %v; want all by sb", by)
	}
	fires := e.firesOf(ids)
	for _, fs := range fires {
		for _, f := range fs {
			if f.replica == "sa" {
				t.Errorf("task %s fired by the fenced replica", f.id)
			}
		}
	}
	t.Logf("sa gave up its partitions %v after its heartbeats began to fail (lease 1s)", fenced)

	flaky.cut.Store(false)
	e.stable(a, b)
	if len(a.owned()) == 0 {
		t.Fatal("sa owns nothing after it rejoined")
	}
	again := e.idsIn("rejoin", 60, func(int) bool { return true })
	e.create(again, time.Now().UnixMilli())
	e.settled(again, 15*time.Second)
	if by := e.once(again); by["sa"] == 0 || by["sb"] == 0 {
		t.Errorf("after sa rejoined, fires by replica %v; want both to fire", by)
	}
}

// handedOff checks that ids fired once each, and that in every partition the fenced replica sa's
// last fire came before the new owner sb's first after the cut.
func handedOff(t *testing.T, e *partEnv, ids []string, cut time.Time) {
	t.Helper()
	by := e.once(ids)
	lastA, firstB := map[int]time.Time{}, map[int]time.Time{}
	for id, fs := range e.firesOf(ids) {
		p := kvstore.Partition(id, e.n)
		for _, f := range fs {
			switch f.replica {
			case "sa":
				if f.at.After(lastA[p]) {
					lastA[p] = f.at
				}
			case "sb":
				if cur, ok := firstB[p]; f.at.After(cut) && (!ok || f.at.Before(cur)) {
					firstB[p] = f.at
				}
			}
		}
	}
	handed := 0
	for p, at := range lastA {
		if b, ok := firstB[p]; ok {
			handed++
			if !at.Before(b) {
				t.Errorf("partition %d: the fenced replica sa fired at +%v after the cut, the new owner sb first at +%v", p, at.Sub(cut), b.Sub(cut))
			}
		}
	}
	if by["sa"] == 0 || handed == 0 {
		t.Errorf("the hand-off was not exercised: fires by replica %v, %d partitions fired by sa then by sb", by, handed)
	}
}
