package membership

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/kvstore"
)

// memStore is the members bucket in memory, for tests in a synctest bubble: keys expire their TTL
// after their last write, and watchers get the keys that exist, InitDone, then every change.
type memStore struct {
	mu       sync.Mutex
	keys     map[string]*memKey
	rev      uint64
	watchers map[*memWatcher]bool
	faults   map[string]*faults // by replica
	lag      time.Duration      // the store's clock runs this much behind the members'
}

type memKey struct {
	value string
	rev   uint64
	at    time.Time
	exp   *time.Timer
}

type memWatcher struct {
	ch chan kvstore.MemberEvent
}

// faults is what the store does to one replica's calls.
type faults struct {
	cut       bool          // heartbeats fail and land nowhere
	lose      bool          // heartbeats land but report a failure
	slow      time.Duration // heartbeats land at once but are confirmed this much later
	failWatch int           // this many WatchMembers calls fail
}

func newMemStore() *memStore {
	return &memStore{keys: map[string]*memKey{}, watchers: map[*memWatcher]bool{}, faults: map[string]*faults{}}
}

// of is the store as replica sees it.
func (s *memStore) of(replica string) *memView { return &memView{s: s, replica: replica} }

// set changes replica's faults.
func (s *memStore) set(replica string, f func(*faults)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.faults[replica] == nil {
		s.faults[replica] = &faults{}
	}
	f(s.faults[replica])
}

func (s *memStore) fault(replica string) faults {
	if f := s.faults[replica]; f != nil {
		return *f
	}
	return faults{}
}

// has reports whether key exists.
func (s *memStore) has(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[key] != nil
}

// write writes key as another process would.
func (s *memStore) write(key, value string, ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.put(key, value, ttl)
}

// endWatches closes every watch, as a failed watch does.
func (s *memStore) endWatches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.watchers {
		close(w.ch)
		delete(s.watchers, w)
	}
}

// Lock should be held.
func (s *memStore) put(key, value string, ttl time.Duration) uint64 {
	if k := s.keys[key]; k != nil {
		k.exp.Stop()
	}
	s.rev++
	k := &memKey{value: value, rev: s.rev, at: time.Now().Add(-s.lag)}
	k.exp = time.AfterFunc(ttl, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.keys[key] == k {
			s.del(key)
		}
	})
	s.keys[key] = k
	s.notify(kvstore.MemberEvent{ID: memberID(key), At: k.at, Value: []byte(value)})
	return k.rev
}

// Lock should be held.
func (s *memStore) del(key string) {
	if k := s.keys[key]; k != nil {
		k.exp.Stop()
		delete(s.keys, key)
		s.notify(kvstore.MemberEvent{ID: memberID(key), Deleted: true})
	}
}

// Lock should be held.
func (s *memStore) notify(ev kvstore.MemberEvent) {
	if ev.ID == "" {
		return
	}
	for w := range s.watchers {
		w.ch <- ev
	}
}

func memberID(key string) string {
	if len(key) > 2 && key[:2] == "m." {
		return key[2:]
	}
	return ""
}

// memView is the memStore as one replica calls it.
type memView struct {
	s       *memStore
	replica string
}

var errCut = errors.New("cut off")

func (v *memView) Heartbeat(ctx context.Context, replica string, value []byte, ttl time.Duration) error {
	s := v.s
	s.mu.Lock()
	f := s.fault(v.replica)
	if f.cut {
		s.mu.Unlock()
		return errCut
	}
	s.put("m."+replica, string(value), ttl)
	s.mu.Unlock()
	if f.slow > 0 {
		select {
		case <-time.After(f.slow):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if f.lose {
		return errors.New("confirmation lost")
	}
	return nil
}

func (v *memView) Leave(ctx context.Context, replica string) error {
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fault(v.replica).cut {
		return errCut
	}
	s.del("m." + replica)
	return nil
}

func (v *memView) WatchMembers(ctx context.Context) (<-chan kvstore.MemberEvent, error) {
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.faults[v.replica]; f != nil && f.failWatch > 0 {
		f.failWatch--
		return nil, errors.New("watch refused")
	}
	w := &memWatcher{ch: make(chan kvstore.MemberEvent, 4096)}
	for key, k := range s.keys {
		if id := memberID(key); id != "" {
			w.ch <- kvstore.MemberEvent{ID: id, At: k.at, Value: []byte(k.value)}
		}
	}
	w.ch <- kvstore.MemberEvent{InitDone: true}
	s.watchers[w] = true
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.watchers[w] {
			delete(s.watchers, w)
			close(w.ch)
		}
	})
	return w.ch, nil
}

func (v *memView) Campaign(ctx context.Context, key, holder string, ttl time.Duration) (uint64, error) {
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys[key] != nil {
		return 0, kvstore.ErrConflict
	}
	return s.put(key, holder, ttl), nil
}

func (v *memView) Renew(ctx context.Context, key, holder string, rev uint64, ttl time.Duration) (uint64, error) {
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.keys[key]; k == nil || k.rev != rev {
		return 0, kvstore.ErrConflict
	}
	return s.put(key, holder, ttl), nil
}

func (v *memView) Resign(ctx context.Context, key string, rev uint64) error {
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.keys[key]; k == nil || k.rev != rev {
		return kvstore.ErrConflict
	}
	s.del(key)
	return nil
}

// fakeConn is a replica's NATS connection that the test takes down and up.
type fakeConn struct {
	mu        sync.Mutex
	up        bool
	listeners map[chan nats.Status]bool
}

func newFakeConn() *fakeConn { return &fakeConn{up: true, listeners: map[chan nats.Status]bool{}} }

func (c *fakeConn) IsConnected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.up
}

func (c *fakeConn) StatusChanged(...nats.Status) chan nats.Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan nats.Status, 8)
	c.listeners[ch] = true
	return ch
}

func (c *fakeConn) RemoveStatusListener(ch chan nats.Status) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.listeners, ch)
}

// set takes the connection up or down.
func (c *fakeConn) set(up bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.up = up
	st := nats.DISCONNECTED
	if up {
		st = nats.CONNECTED
	}
	for ch := range c.listeners {
		select {
		case ch <- st:
		default:
		}
	}
}
