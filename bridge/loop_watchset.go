package bridge

import (
	"context"
	"errors"
	"sync"

	"github.com/axbridge/axbridge/kvstore"
)

// watchSet is the loop's task watch: the watch of the partitions owned when it was started, plus
// one watch for each gain since (add), so that a replica that gains partitions loads only those
// while the others go on. Their events are merged; per key they keep their watch's order. When
// any of them ends, the set ends (Events closes) and the loop starts one watch of all it owns.
type watchSet struct {
	out  chan kvstore.Event
	once sync.Once
	fwd  sync.WaitGroup // the forwarding goroutines

	mu      sync.Mutex
	done    chan struct{} // closed (under mu) when one watch ended or Stop was called
	watches []kvstore.Watcher
	cancels []context.CancelFunc // of the contexts the watches live under (nil for none)
	loading map[int]int          // partitions whose initial values have not all been handed on: how many watches load them
}

// newWatchSet is a set of w, the watch of parts, which lives under the context cancel ends.
func newWatchSet(w kvstore.Watcher, cancel context.CancelFunc, parts []int) *watchSet {
	s := &watchSet{out: make(chan kvstore.Event), done: make(chan struct{}), loading: map[int]int{}}
	s.expect(parts)
	s.add(w, cancel, parts)
	go func() {
		<-s.done
		s.fwd.Wait()
		close(s.out)
	}()
	return s
}

// expect marks parts as loading until the watch that loads them, added with them, has handed on
// its initial values.
func (s *watchSet) expect(parts []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range parts {
		s.loading[p]++
	}
}

// isLoading reports whether partition p is still loading (expect).
func (s *watchSet) isLoading(p int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loading[p] > 0
}

// anyLoading reports whether any partition is still loading.
func (s *watchSet) anyLoading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.loading) > 0
}

func (s *watchSet) loaded(parts []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range parts {
		if s.loading[p]--; s.loading[p] <= 0 {
			delete(s.loading, p)
		}
	}
}

// add merges w's events, the watch of parts (expected), into the set's; it reports false, and
// stops w, if the set has ended.
func (s *watchSet) add(w kvstore.Watcher, cancel context.CancelFunc, parts []int) bool {
	s.mu.Lock()
	if s.ended() {
		s.mu.Unlock()
		_ = w.Stop()
		if cancel != nil {
			cancel()
		}
		return false
	}
	s.watches = append(s.watches, w)
	s.cancels = append(s.cancels, cancel)
	s.fwd.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.fwd.Done()
		for ev := range w.Events() {
			select {
			case s.out <- ev:
			case <-s.done:
				return
			}
			if ev.Kind == kvstore.EventInitDone && parts != nil {
				s.loaded(parts)
				parts = nil
			}
		}
		s.end() // this watch ended: so does the set
	}()
	return true
}

// end ends the set; under mu, so that add never starts a forwarder once the set is closing.
func (s *watchSet) end() {
	s.once.Do(func() {
		s.mu.Lock()
		close(s.done)
		s.mu.Unlock()
	})
}

// ended reports whether the set has ended (s.mu held).
func (s *watchSet) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// size is how many watches the set holds.
func (s *watchSet) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.watches)
}

// Events is the merged events, closed once the set has ended and every forwarder returned.
func (s *watchSet) Events() <-chan kvstore.Event { return s.out }

// Stop ends the set and stops every watch of it.
func (s *watchSet) Stop() error {
	s.end()
	s.mu.Lock()
	ws, cs := s.watches, s.cancels
	s.watches, s.cancels = nil, nil
	s.mu.Unlock()
	var errs []error
	for i, w := range ws {
		errs = append(errs, w.Stop())
		if cs[i] != nil {
			cs[i]()
		}
	}
	return errors.Join(errs...)
}
