// Package faultstore wraps a task store with faults injected on demand, for tests of what the
// bridge does when the store misbehaves: a write that fails before it is applied, a write that is
// applied but whose caller hears nothing (outcome unknown), a conflict, a call that hangs until its
// context ends, a watch that ends, and a watch event that never arrives.
//
// Faults are rules matched by operation and, optionally, task id; each applies a number of times
// (or until cleared). Calls are counted per operation whether or not a fault applied.
package faultstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/axbridge/axbridge/kvstore"
)

// Op names an operation of the store. The async variants count as their synchronous operation.
type Op string

// The operations a rule can match.
const (
	OpCreate  Op = "create"
	OpGet     Op = "get"
	OpGetMany Op = "getmany"
	OpUpdate  Op = "update"
	OpDelete  Op = "delete"
	OpWatch   Op = "watch"
	// OpEvent matches watch events (put or delete) of running watches: Drop is the only mode.
	OpEvent Op = "event"
)

// Mode is what a matching rule does to the call.
type Mode uint8

const (
	// FailBefore returns an error and applies nothing (Rule.Err, or one wrapping ErrInjected).
	FailBefore Mode = iota + 1
	// ApplyThenTimeout applies the write, then reports an unknown outcome (an error wrapping
	// ErrUnknownOutcome and context.DeadlineExceeded) instead of the result. For reads it
	// behaves as FailBefore.
	ApplyThenTimeout
	// Conflict returns an error wrapping kvstore.ErrConflict and applies nothing.
	Conflict
	// Hang blocks until the call's context ends, applies nothing and returns its error.
	Hang
	// Drop (OpEvent only) swallows a matching watch event: the running watch never delivers it.
	Drop
)

// Errors reported by injected faults.
var (
	ErrInjected       = errors.New("faultstore: injected failure")
	ErrUnknownOutcome = errors.New("faultstore: no answer, outcome unknown")
)

// Rule is one fault. Zero ID matches every task; Times 0 applies until Clear.
type Rule struct {
	Op    Op
	ID    string
	Mode  Mode
	Times int
	Err   error // FailBefore: the error to return (default wraps ErrInjected)
}

// Store is a kvstore.Store with faults. It is safe for concurrent use.
type Store struct {
	inner kvstore.Store

	mu      sync.Mutex
	rules   []*rule
	calls   map[Op]int
	watches map[*watch]struct{}
}

type rule struct {
	Rule
	left int // applications left; < 0 unlimited
}

var _ kvstore.Store = (*Store)(nil)

// New wraps inner; with no rules it behaves exactly as inner.
func New(inner kvstore.Store) *Store {
	return &Store{inner: inner, calls: make(map[Op]int), watches: make(map[*watch]struct{})}
}

// Inject adds a rule; rules are tried in the order they were added.
func (s *Store) Inject(r Rule) {
	s.mu.Lock()
	defer s.mu.Unlock()
	left := r.Times
	if left == 0 {
		left = -1
	}
	s.rules = append(s.rules, &rule{Rule: r, left: left})
}

// Clear removes every rule.
func (s *Store) Clear() {
	s.mu.Lock()
	s.rules = nil
	s.mu.Unlock()
}

// Calls is how many calls of op the store has seen (events: how many were delivered or dropped).
func (s *Store) Calls(op Op) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

// EndWatches ends every running watch, as a server restart or a lost subscription would: their
// Events channels close.
func (s *Store) EndWatches() {
	s.mu.Lock()
	ws := make([]*watch, 0, len(s.watches))
	for w := range s.watches {
		ws = append(ws, w)
	}
	s.mu.Unlock()
	for _, w := range ws {
		_ = w.inner.Stop()
	}
}

// match counts the call and returns the mode of the first rule that applies (0 if none).
func (s *Store) match(op Op, id string) (Mode, error) { return s.matchAny(op, []string{id}) }

// matchAny is match for a call on several ids: a rule applies if its ID is any of them.
func (s *Store) matchAny(op Op, ids []string) (Mode, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[op]++
	for i, r := range s.rules {
		if r.Op != op || (r.ID != "" && !slices.Contains(ids, r.ID)) {
			continue
		}
		if r.left > 0 {
			r.left--
		}
		if r.left == 0 {
			s.rules = append(s.rules[:i:i], s.rules[i+1:]...)
		}
		return r.Mode, r.Err
	}
	return 0, nil
}

// fault returns the error of a fault that applies nothing (FailBefore, Conflict, Hang), or nil.
func fault(ctx context.Context, op Op, id string, mode Mode, err error) error {
	switch mode {
	case FailBefore:
		if err != nil {
			return err
		}
		return fmt.Errorf("%s %s: %w", op, id, ErrInjected)
	case Conflict:
		return fmt.Errorf("%s %s: %w (injected)", op, id, kvstore.ErrConflict)
	case Hang:
		<-ctx.Done()
		return fmt.Errorf("%s %s: %w", op, id, ctx.Err())
	}
	return nil
}

func unknown(op Op, id string) error {
	return fmt.Errorf("%s %s: %w: %w", op, id, ErrUnknownOutcome, context.DeadlineExceeded)
}

// Partitions is the inner store's partition count.
func (s *Store) Partitions() int { return s.inner.Partitions() }

// Create is the inner Create with faults.
func (s *Store) Create(ctx context.Context, t *kvstore.Task) (kvstore.Entry, error) {
	mode, ferr := s.match(OpCreate, t.ID)
	if err := fault(ctx, OpCreate, t.ID, mode, ferr); err != nil {
		return kvstore.Entry{}, err
	}
	e, err := s.inner.Create(ctx, t)
	if mode == ApplyThenTimeout {
		return kvstore.Entry{}, unknown(OpCreate, t.ID)
	}
	return e, err
}

// Get is the inner Get with faults.
func (s *Store) Get(ctx context.Context, id string) (kvstore.Entry, error) {
	mode, ferr := s.match(OpGet, id)
	if mode == ApplyThenTimeout {
		mode = FailBefore
	}
	if err := fault(ctx, OpGet, id, mode, ferr); err != nil {
		return kvstore.Entry{}, err
	}
	return s.inner.Get(ctx, id)
}

// GetMany is the inner GetMany with faults; a rule with an ID applies if any of ids matches.
func (s *Store) GetMany(ctx context.Context, ids []string) ([]kvstore.Entry, error) {
	mode, ferr := s.matchAny(OpGetMany, ids)
	if mode == ApplyThenTimeout {
		mode = FailBefore
	}
	if err := fault(ctx, OpGetMany, "", mode, ferr); err != nil {
		return nil, err
	}
	return s.inner.GetMany(ctx, ids)
}

// Update is the inner Update with faults.
func (s *Store) Update(ctx context.Context, t *kvstore.Task, rev uint64) (uint64, error) {
	mode, ferr := s.match(OpUpdate, t.ID)
	if err := fault(ctx, OpUpdate, t.ID, mode, ferr); err != nil {
		return 0, err
	}
	r, err := s.inner.Update(ctx, t, rev)
	if mode == ApplyThenTimeout {
		return 0, unknown(OpUpdate, t.ID)
	}
	return r, err
}

// Delete is the inner Delete with faults.
func (s *Store) Delete(ctx context.Context, id string, rev uint64) error {
	mode, ferr := s.match(OpDelete, id)
	if err := fault(ctx, OpDelete, id, mode, ferr); err != nil {
		return err
	}
	err := s.inner.Delete(ctx, id, rev)
	if mode == ApplyThenTimeout {
		return unknown(OpDelete, id)
	}
	return err
}

// CreateAsync is the inner CreateAsync with faults; done is called on another goroutine.
func (s *Store) CreateAsync(ctx context.Context, t *kvstore.Task, done func(kvstore.Entry, error)) {
	mode, ferr := s.match(OpCreate, t.ID)
	if mode == 0 {
		s.inner.CreateAsync(ctx, t, done)
		return
	}
	go func() {
		if err := fault(ctx, OpCreate, t.ID, mode, ferr); err != nil {
			done(kvstore.Entry{}, err)
			return
		}
		_, _ = s.inner.Create(ctx, t)
		done(kvstore.Entry{}, unknown(OpCreate, t.ID))
	}()
}

// UpdateAsync is the inner UpdateAsync with faults; done is called on another goroutine.
func (s *Store) UpdateAsync(ctx context.Context, t *kvstore.Task, rev uint64, done func(uint64, error)) {
	mode, ferr := s.match(OpUpdate, t.ID)
	if mode == 0 {
		s.inner.UpdateAsync(ctx, t, rev, done)
		return
	}
	go func() {
		if err := fault(ctx, OpUpdate, t.ID, mode, ferr); err != nil {
			done(0, err)
			return
		}
		_, _ = s.inner.Update(ctx, t, rev)
		done(0, unknown(OpUpdate, t.ID))
	}()
}

// DeleteAsync is the inner DeleteAsync with faults; done is called on another goroutine.
func (s *Store) DeleteAsync(ctx context.Context, id string, rev uint64, done func(error)) {
	mode, ferr := s.match(OpDelete, id)
	if mode == 0 {
		s.inner.DeleteAsync(ctx, id, rev, done)
		return
	}
	go func() {
		if err := fault(ctx, OpDelete, id, mode, ferr); err != nil {
			done(err)
			return
		}
		_ = s.inner.Delete(ctx, id, rev)
		done(unknown(OpDelete, id))
	}()
}

// Watch is the inner Watch with faults on its start (FailBefore, Hang) and on its events (Drop).
func (s *Store) Watch(ctx context.Context, partitions ...int) (kvstore.Watcher, error) {
	mode, ferr := s.match(OpWatch, "")
	if mode == ApplyThenTimeout || mode == Conflict {
		mode = FailBefore
	}
	if err := fault(ctx, OpWatch, "", mode, ferr); err != nil {
		return nil, err
	}
	inner, err := s.inner.Watch(ctx, partitions...)
	if err != nil {
		return nil, err
	}
	w := &watch{s: s, inner: inner, events: make(chan kvstore.Event), stop: make(chan struct{}), done: make(chan struct{})}
	s.mu.Lock()
	s.watches[w] = struct{}{}
	s.mu.Unlock()
	go w.forward()
	return w, nil
}

// watch forwards a running inner watch's events, dropping those a Drop rule matches.
type watch struct {
	s        *Store
	inner    kvstore.Watcher
	events   chan kvstore.Event // written and closed by forward
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{} // closed when forward returns
}

func (w *watch) Events() <-chan kvstore.Event { return w.events }

// Stop ends the watch and waits for its goroutine. Idempotent.
func (w *watch) Stop() error {
	w.stopOnce.Do(func() { close(w.stop) })
	err := w.inner.Stop()
	<-w.done
	return err
}

func (w *watch) forward() {
	defer close(w.done)
	defer close(w.events)
	defer func() {
		w.s.mu.Lock()
		delete(w.s.watches, w)
		w.s.mu.Unlock()
	}()
	for {
		var ev kvstore.Event
		var ok bool
		select {
		case ev, ok = <-w.inner.Events():
			if !ok {
				return
			}
		case <-w.stop:
			return
		}
		if ev.Kind == kvstore.EventPut || ev.Kind == kvstore.EventDelete {
			if mode, _ := w.s.match(OpEvent, ev.ID); mode == Drop {
				continue
			}
		}
		select {
		case w.events <- ev:
		case <-w.stop:
			return
		}
	}
}
