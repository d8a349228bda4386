package kvstore

import (
	"context"

	"github.com/axbridge/axbridge/kvstore/record"
)

// Store is the method set both implementations offer (*JetStore on a JetStream KV bucket and
// *MemStore in memory), with identical semantics; one conformance suite runs against both.
// Consumers such as the bridge declare the subset they need.
//
// A record written with a final status (Status.Final) retires by itself after the store's
// retention: it then reads as ErrNotFound, watchers get EventDelete, and Create takes the id as a
// new task. Live records never expire.
type Store interface {
	// Create stores t (status and all) under Key(t.ID) if no record exists there.
	// If one exists it returns that record and an error matching ErrExists.
	Create(ctx context.Context, t *Task) (Entry, error)
	// Get returns the current record, or ErrNotFound.
	Get(ctx context.Context, id string) (Entry, error)
	// GetMany returns the records of those ids that exist, in batched reads, for reading ahead.
	// On a replicated bucket a record may be slightly stale: use it only for a CAS write.
	GetMany(ctx context.Context, ids []string) ([]Entry, error)
	// Update replaces the record if its revision is still rev; otherwise ErrConflict
	// (ErrNotFound if the key has been deleted or never existed... also reported as ErrConflict
	// when the server cannot tell the two apart). Returns the new revision.
	Update(ctx context.Context, t *Task, rev uint64) (uint64, error)
	// Delete removes the record if its revision is still rev; otherwise ErrConflict.
	Delete(ctx context.Context, id string, rev uint64) error

	// CreateAsync, UpdateAsync and DeleteAsync start the same operations without waiting: they
	// return at once (after at most a short flow-control wait) and call done exactly once, on
	// another goroutine, with the outcome. Many may be in flight; done calls come in no promised
	// order. done must not block for long.
	CreateAsync(ctx context.Context, t *Task, done func(Entry, error))
	UpdateAsync(ctx context.Context, t *Task, rev uint64, done func(uint64, error))
	DeleteAsync(ctx context.Context, id string, rev uint64, done func(error))

	// Watch delivers the current records of the given partitions (all partitions if none are
	// given), then one EventInitDone, then live changes including deletes (a retired record's
	// too), until ctx ends or Stop is called. Starting it is bounded like any store call (ctx's
	// deadline, or the store's timeout). Events wait in the watcher for a reader that is behind:
	// JetStore holds at most Config.WatchBuffer and then stops taking from the server, whose
	// flow control holds the rest back; MemStore's writers never wait, so its queue has no bound.
	// The initial values may be partial (Entry.Partial: the state without the payload; JetStore
	// reads them from the records' headers); live changes are whole records.
	Watch(ctx context.Context, partitions ...int) (Watcher, error)

	// Partitions is the bucket's partition count.
	Partitions() int
}

// The watch event types live in package record.
type (
	EventKind = record.EventKind
	Event     = record.Event
)

// The event kinds (record.EventKind).
const (
	EventPut      = record.EventPut
	EventDelete   = record.EventDelete
	EventInitDone = record.EventInitDone
	EventError    = record.EventError
)

// Watcher is a running watch.
type Watcher interface {
	// Events is closed after Stop, or when the watch context ends.
	Events() <-chan Event
	Stop() error
}
