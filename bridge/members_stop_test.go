package bridge

import (
	"context"
	"testing"
	"time"

	"github.com/axbridge/axbridge/kvstore"
)

// laggingWatch hands the member events on lag after they arrived, as a busy replica would.
type laggingWatch struct {
	Membership
	lag time.Duration
}

func (l *laggingWatch) WatchMembers(ctx context.Context) (<-chan kvstore.MemberEvent, error) {
	in, err := l.Membership.WatchMembers(ctx)
	if err != nil {
		return nil, err
	}
	type arrived struct {
		ev kvstore.MemberEvent
		at time.Time
	}
	mid, out := make(chan arrived, 4096), make(chan kvstore.MemberEvent)
	go func() {
		defer close(mid)
		for ev := range in {
			select {
			case mid <- arrived{ev, time.Now()}:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() {
		defer close(out)
		for a := range mid {
			t := time.NewTimer(time.Until(a.at.Add(l.lag)))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
			select {
			case out <- a.ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// A replica stopped gracefully keeps taking the acks of its partitions until the others can have
// subscribed to them (review N4): acks its consumers send right after its leave landed, while the
// survivor (its member view half a second behind) has not yet taken the partitions over, are
// applied; every task ends SUCCESS at attempt 1 and none fires again.
func TestGracefulStopKeepsAcks(t *testing.T) {
	t.Parallel()
	e := newPartEnv(t, 60, 4*time.Second)
	a := e.start("ga", nil)
	b := e.start("gb", func(m Membership) Membership { return &laggingWatch{Membership: m, lag: 500 * time.Millisecond} })
	e.stable(a, b)
	e.ack.Store(false)
	mine := map[int]bool{}
	for _, p := range a.owned() {
		mine[p] = true
	}
	ids := e.idsIn("stop", 30, func(p int) bool { return mine[p] })
	e.create(ids, time.Now().UnixMilli())
	if !checkFor(10*time.Second, func() bool { e.mu.Lock(); defer e.mu.Unlock(); return len(e.hold) == len(ids) }) {
		t.Fatal("the tasks did not fire")
	}
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stopped <- a.b.Stop(ctx)
	}()
	kv := membersKV(t, e)
	if !checkFor(10*time.Second, func() bool { _, ok := memberKey(t, kv, "ga"); return !ok }) {
		t.Fatal("ga's leave did not land")
	}
	e.mu.Lock()
	held := e.hold
	e.mu.Unlock()
	for _, m := range held { // as nats.go's Msg.Ack sends them: no answer awaited
		if err := m.Respond([]byte("+ACK")); err != nil {
			t.Fatal(err)
		}
	}
	e.settled(ids, 15*time.Second)
	for id, fs := range e.firesOf(ids) {
		if len(fs) != 1 || fs[0].replica != "ga" {
			t.Errorf("task %s fired %+v; want once, by ga", id, fs)
		}
	}
	if err := <-stopped; err != nil {
		t.Errorf("stop ga: %v", err)
	}
}
