package bridge

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/axbridge/axbridge/internal/natstest"

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

// watchLog records the partitions of every watch its store is asked for.
type watchLog struct {
	*kvstore.JetStore
	mu    sync.Mutex
	calls [][]int
}

func (w *watchLog) Watch(ctx context.Context, partitions ...int) (kvstore.Watcher, error) {
	w.mu.Lock()
	w.calls = append(w.calls, slices.Clone(partitions))
	w.mu.Unlock()
	return w.JetStore.Watch(ctx, partitions...)
}

func (w *watchLog) last() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.calls) == 0 {
		return nil
	}
	return w.calls[len(w.calls)-1]
}

// A replica that gains partitions (another died) loads only those: its next watch asks for just
// the gained partitions, while the partitions it kept are not loaded again, and the dead one's
// tasks fire from it.
func TestGainLoadsOnlyTheGain(t *testing.T) {
	t.Parallel()
	e := newPartEnv(t, 60, time.Second)
	var log *watchLog
	a := e.startWith("wa", natstest.Connect(t, e.srv.ClientURL()), nil, func(s *kvstore.JetStore) Store {
		log = &watchLog{JetStore: s}
		return log
	})
	b := e.start("wb", nil)
	e.stable(a, b)
	kept, lost := a.owned(), b.owned()
	b.nc.Close() // dies: no leave, its key expires
	if !checkFor(10*time.Second, func() bool { return len(a.owned()) == e.n }) {
		t.Fatalf("wa owns %d partitions after wb died", len(a.owned()))
	}
	if !checkFor(5*time.Second, func() bool { return slices.Equal(log.last(), lost) }) {
		t.Errorf("after the gain wa watched %v; want only wb's partitions %v (wa kept %v)", log.last(), lost, kept)
	}
	ids := e.idsIn("gain", 30, func(p int) bool { return slices.Contains(lost, p) })
	e.create(ids, time.Now().UnixMilli())
	e.settled(ids, 15*time.Second)
	if by := e.once(ids); by["wa"] != len(ids) {
		t.Errorf("fires by replica %v; want all %d by wa", by, len(ids))
	}
}
