package bridge_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/faultstore"
	"github.com/axbridge/axbridge/kvstore"
)

// lateStore reproduces, in a fixed order, the interleaving the chaos suite found: a claim of
// revision R lands but its outcome reaches the bridge only after the attempt's lease has ended
// and the task is WAITING again at R'; the read-back that follows sees R' WAITING, and the
// index's own fire job claims R' right after that read.
type lateStore struct {
	*faultstore.Store
	mem *kvstore.MemStore

	mu       sync.Mutex
	claims   int           // claims of the task seen so far
	armed    bool          // the late outcome was reported: the next Get is the read-back
	timeouts []string      // the steps of the interleaving that waited in vain
	readOut  chan struct{} // closed once the read-back has read
	readDone chan struct{} // closed once the read-back has returned what it read
}

func (s *lateStore) record() kvstore.Entry {
	e, _ := s.mem.Get(context.Background(), "a")
	return e
}

// wait polls until cond holds, for at most 10 s; a store call that waits longer goes on, and
// the step is noted (the test then fails: the interleaving it builds did not happen).
func (s *lateStore) wait(step string, cond func() bool) {
	if !bridge.CheckFor(10*time.Second, cond) {
		s.mu.Lock()
		s.timeouts = append(s.timeouts, step)
		s.mu.Unlock()
	}
}

func (s *lateStore) UpdateAsync(ctx context.Context, t *kvstore.Task, rev uint64, done func(uint64, error)) {
	if t.ID != "a" || t.Status != kvstore.StatusRunning || t.Claim != rev {
		s.Store.UpdateAsync(ctx, t, rev, done)
		return
	}
	s.mu.Lock()
	s.claims++
	n := s.claims
	s.mu.Unlock()
	if n == 1 { // lands; its outcome is reported, as unknown, once the task is WAITING again
		s.Store.UpdateAsync(ctx, t, rev, func(uint64, error) {
			go func() {
				s.wait("the task WAITING again after the first claim's lease", func() bool {
					e := s.record()
					return e.Task.Status == kvstore.StatusWaiting && e.Revision > rev+1
				})
				s.mu.Lock()
				s.armed = true
				s.mu.Unlock()
				done(0, faultstore.ErrUnknownOutcome)
			}()
		})
		return
	}
	if n == 2 { // the index's fire job of R': it claims only after the read-back has read R'
		go func() {
			select {
			case <-s.readOut:
			case <-time.After(10 * time.Second):
				s.mu.Lock()
				s.timeouts = append(s.timeouts, "the read-back before the second claim")
				s.mu.Unlock()
			}
			s.Store.UpdateAsync(ctx, t, rev, done)
		}()
		return
	}
	s.Store.UpdateAsync(ctx, t, rev, done)
}

func (s *lateStore) Get(ctx context.Context, id string) (kvstore.Entry, error) {
	s.mu.Lock()
	readBack := id == "a" && s.armed
	s.armed = false
	s.mu.Unlock()
	e, err := s.Store.Get(ctx, id)
	if readBack {
		close(s.readOut)
		// Return what was read only once the other job's claim of it has landed.
		s.wait("the second claim landing before the read-back returns", func() bool {
			r := s.record()
			return r.Task.Status == kvstore.StatusRunning && r.Task.Claim == e.Revision
		})
		close(s.readDone)
	}
	return e, err
}

// A read-back of a claim whose outcome was unknown, which finds the task WAITING again at a newer
// revision and then loses its claim of that revision to the bridge's own fire job, does not take
// that job's claim for its own: the attempt is published once.
func TestUnsureReadBackDoesNotRepublish(t *testing.T) {
	t.Parallel()
	var ls *lateStore
	fe := newFaultEnvCfg(t, func(s *faultstore.Store) bridge.Store {
		ls = &lateStore{Store: s, readOut: make(chan struct{}), readDone: make(chan struct{})}
		return ls
	}, bridge.Config{})
	ls.mem = fe.mem
	fires := fe.fires("late")
	fe.dueWith("a", "late", 3, time.Second, []time.Duration{0})
	m := next(t, fires)
	firstAt := time.Now()
	// The first claim's outcome was never known before its lease ended: its attempt was not
	// published and was given back uncounted; the fire is the second claim's, attempt 1 again.
	if got := m.Header.Get(bridge.HeaderAttempt); got != "1" {
		t.Errorf("first fire is attempt %s, want 1 (the fire job's claim of R', after the first claim's attempt was given back)", got)
	}
	select {
	case <-ls.readDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the read-back did not return")
	}
	// The consumer stays silent: the next attempt comes only after the 1 s lease, so any fire
	// within 700 ms of the first (and after the read-back returned) is the same attempt again.
	select {
	case m2 := <-fires:
		t.Errorf("attempt %s fired, then attempt %s within 700ms", m.Header.Get(bridge.HeaderAttempt), m2.Header.Get(bridge.HeaderAttempt))
	case <-time.After(time.Until(firstAt.Add(700 * time.Millisecond))):
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.claims < 2 || len(ls.timeouts) > 0 {
		t.Errorf("the interleaving did not happen: %d claims, waited in vain for %v", ls.claims, ls.timeouts)
	}
}
