package bridge

import (
	"context"
	"errors"
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

// lagGain delays the events of the watch of exactly the partitions in target, as a slow load of
// a gain would be; every other watch (the reconciler's among them) is as the store makes it.
type lagGain struct {
	*kvstore.JetStore
	lag    time.Duration
	mu     sync.Mutex
	target []int
	lagged int
}

func (s *lagGain) Watch(ctx context.Context, partitions ...int) (kvstore.Watcher, error) {
	w, err := s.JetStore.Watch(ctx, partitions...)
	s.mu.Lock()
	lag := s.target != nil && slices.Equal(partitions, s.target)
	if lag {
		s.lagged++
	}
	s.mu.Unlock()
	if err != nil || !lag {
		return w, err
	}
	return newLaggingWatcher(ctx, w, s.lag), nil
}

// laggingWatcher hands on w's events lag after they arrived.
type laggingWatcher struct {
	kvstore.Watcher
	out chan kvstore.Event
}

func newLaggingWatcher(ctx context.Context, w kvstore.Watcher, lag time.Duration) *laggingWatcher {
	l := &laggingWatcher{Watcher: w, out: make(chan kvstore.Event)}
	type arrived struct {
		ev kvstore.Event
		at time.Time
	}
	mid := make(chan arrived, 1<<16)
	go func() {
		defer close(mid)
		for ev := range w.Events() {
			mid <- arrived{ev, time.Now()}
		}
	}()
	go func() {
		defer close(l.out)
		for a := range mid {
			select {
			case <-time.After(time.Until(a.at.Add(lag))):
			case <-ctx.Done():
			}
			select {
			case l.out <- a.ev:
			case <-ctx.Done():
				for range mid { // until w's channel closes
				}
				return
			}
		}
	}()
	return l
}

func (l *laggingWatcher) Events() <-chan kvstore.Event { return l.out }

// The reconciler leaves alone the partitions a replica is still loading after it gained them
// (review N9): while the gain's watch is slow (2 s), the overdue tasks of the dead replica's
// partitions are not "repaired" by passes every 200 ms, and they fire once, from the load.
func TestReconcilerSkipsPartitionsStillLoading(t *testing.T) {
	t.Parallel()
	e := newPartEnv(t, 60, time.Second)
	e.tune = func(c *Config) { c.ReconcileInterval, c.ReconcileGrace = 200*time.Millisecond, time.Millisecond }
	lg := &lagGain{lag: 2 * time.Second}
	a := e.startWith("ra", natstest.Connect(t, e.srv.ClientURL()), nil, func(s *kvstore.JetStore) Store {
		lg.JetStore = s
		return lg
	})
	b := e.start("rb", nil)
	e.stable(a, b)
	lost := b.owned()
	lg.mu.Lock()
	lg.target = lost
	lg.mu.Unlock()
	ids := e.idsIn("loading", 20, func(p int) bool { return slices.Contains(lost, p) })
	e.create(ids, time.Now().Add(500*time.Millisecond).UnixMilli()) // due after rb is gone
	b.nc.Close()
	e.settled(ids, 20*time.Second)
	if by := e.once(ids); by["ra"] != len(ids) {
		t.Errorf("fires by replica %v; want all %d by ra", by, len(ids))
	}
	lg.mu.Lock()
	lagged := lg.lagged
	lg.mu.Unlock()
	if lagged == 0 {
		t.Fatal("ra never watched the gain on its own: the test's slow load did not happen")
	}
	for _, kind := range []string{"waiting", "running"} {
		if v := value(t, a.b.m.loop.repairs.WithLabelValues(kind)); v != 0 {
			t.Errorf("ra's reconciler repaired %v %s tasks of partitions it was still loading", v, kind)
		}
	}
}

// unsureClaim lands the first claim of task id, but reports its outcome (unknown) only once
// release is closed.
type unsureClaim struct {
	*kvstore.JetStore
	id      string
	landed  chan struct{} // closed once the claim is written
	release chan struct{}
	once    sync.Once
}

func (u *unsureClaim) UpdateAsync(ctx context.Context, t *kvstore.Task, rev uint64, done func(uint64, error)) {
	first := false
	if t.ID == u.id && t.Status == kvstore.StatusRunning && t.Claim == rev {
		u.once.Do(func() { first = true })
	}
	if !first {
		u.JetStore.UpdateAsync(ctx, t, rev, done)
		return
	}
	u.JetStore.UpdateAsync(ctx, t, rev, func(_ uint64, err error) {
		if err == nil {
			close(u.landed)
		}
		go func() {
			<-u.release
			done(0, errors.New("no answer, outcome unknown"))
		}()
	})
}

// A claim whose outcome was unknown, and whose partition moved to another replica before the
// outcome came, is read back all the same (review N2): it landed, so its attempt is published by
// the replica that claimed (the new owner waits for its lease), and the task with no retries left
// ends SUCCESS on its consumer's ack instead of DEAD with no delivery.
func TestUnsureClaimReadBackAfterMove(t *testing.T) {
	t.Parallel()
	e := newPartEnv(t, 60, time.Second)
	two, three := assign([]string{"ua", "ub"}, e.n), assign([]string{"ua", "ub", "uc"}, e.n)
	moves := func(p int) bool { return two[p] == "ua" && three[p] == "uc" }
	id := e.idsIn("unsure", 1, moves)[0]
	u := &unsureClaim{id: id, landed: make(chan struct{}), release: make(chan struct{})}
	a := e.startWith("ua", natstest.Connect(t, e.srv.ClientURL()), nil, func(s *kvstore.JetStore) Store {
		u.JetStore = s
		return u
	})
	b := e.start("ub", nil)
	e.stable(a, b)
	now := time.Now().UnixMilli()
	if _, err := e.store.Create(context.Background(), &kvstore.Task{ID: id, BizType: "part", Payload: []byte(id),
		Status: kvstore.StatusWaiting, DueAt: now, MaxRetry: 0, AckWait: 5 * time.Second,
		Backoff: []time.Duration{time.Second}, CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-u.landed:
	case <-time.After(10 * time.Second):
		t.Fatal("ua did not claim the task")
	}
	c := e.start("uc", nil) // the task's partition moves from ua to uc
	e.stable(a, b, c)
	close(u.release) // now ua hears "outcome unknown"
	e.settled([]string{id}, 15*time.Second)
	if fs := e.firesOf([]string{id})[id]; len(fs) != 1 || fs[0].replica != "ua" {
		t.Errorf("fires %+v; want one, by ua", fs)
	}
}
