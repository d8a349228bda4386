// Package record holds a task record as the scheduling core sees it: the task, its stored
// revision and the changes a watch delivers. It imports no NATS package, so that the bridge's
// scheduling core can be built and tested without one; package kvstore stores these records.
package record

import (
	"hash/fnv"
	"time"
)

// Status is the lifecycle state of a task record.
type Status string

// The task states. WAITING and RUNNING are live; SUCCESS, DEAD and CANCELLED are final
// (a DEAD task can be requeued by an operator).
const (
	StatusWaiting   Status = "WAITING"
	StatusRunning   Status = "RUNNING"
	StatusSuccess   Status = "SUCCESS"
	StatusDead      Status = "DEAD"
	StatusCancelled Status = "CANCELLED"
)

// Final reports whether the status ends the task's life: a write of a final record carries the
// retention as its TTL, and the server removes the record when it runs out.
func (s Status) Final() bool {
	return s == StatusSuccess || s == StatusDead || s == StatusCancelled
}

// Task is one delayed task: the unit stored under one key of the bucket.
// Times are UTC Unix milliseconds; durations are whole milliseconds on the wire.
type Task struct {
	ID      string
	BizType string
	// Payload is the opaque body to publish at the due time.
	Payload []byte
	// Header holds the caller's own headers, passed through to the fire message. Keys and values
	// are stored and read back byte for byte, whatever the bytes.
	Header map[string][]string

	Status     Status
	DueAt      int64 // when the next attempt may fire (UTC Unix ms)
	Attempt    int   // attempts started so far; the next fire carries Attempt+1
	MaxRetry   int   // retries after the first attempt (MaxRetry+1 attempts in all)
	AckWait    time.Duration
	Backoff    []time.Duration // wait before retry n is Backoff[n-1]; the last entry repeats
	LeaseUntil int64           // RUNNING only: when the current attempt's lease ends (UTC Unix ms)
	Owner      string          // replica that holds the lease
	CreatedAt  int64
	UpdatedAt  int64
	// FinishedAt is set when the task reaches a final status; retention counts from it.
	FinishedAt int64
	LastError  string
	// Claim is the fencing token of the current attempt (RUNNING only): the revision of the
	// WAITING record that the claim replaced. A stream sequence is never reused, so no two claims
	// of a key, in any life of its id, share a token; an ack names it and is applied only while
	// the record still carries it.
	Claim uint64
	// Fingerprint identifies what the client sent (bizType, payload, headers as received, the
	// due-time headers excepted), so that a redelivered schedule message is recognised as a
	// duplicate whatever defaults the bridge filled in. Empty in records written before it existed.
	Fingerprint string
	// Series is a recurring task's schedule and progress; nil for a one-shot task.
	Series *Series
}

// The misfire and overlap policies of a series (subjects.md, "Recurring tasks").
const (
	MisfireFireOnce = "fire-once"
	MisfireSkip     = "skip"
	MisfireFireAll  = "fire-all"

	OverlapSkip      = "skip"
	OverlapBufferOne = "buffer-one"
)

// Series is what a recurring task's record holds beyond a one-shot task's: its spec and policies,
// the tick its current occurrence is for and the one after it (written before the current one
// fires), and the counts. A record is copied by value: a transition that changes the series
// copies it first.
type Series struct {
	Every   time.Duration
	Cron    string
	Zone    string
	Misfire string
	Catchup time.Duration
	Overlap string
	MaxRuns int
	Until   int64
	Jitter  time.Duration

	Tick int64 // the current occurrence's tick, UTC Unix ms
	Next int64 // the tick after it; 0: the series ends with this occurrence
	Run  int   // the current occurrence's number, from 1
	// CatchUpTo: under fire-all, the last tick missed in an outage; ticks up to it fire one by one
	// and do not count as overlapping the occurrence before them.
	CatchUpTo int64
	Missed    int64 // ticks not fired because no bridge could in time
	Coalesced int64 // missed ticks fired as one (fire-once)
	Skipped   int64 // ticks that came while an occurrence still ran
	Dead      int64 // occurrences that went DEAD
	// DeadRun and DeadAttempt: the run and the last attempt of the latest occurrence that went DEAD.
	DeadRun, DeadAttempt int
	// Ending: cancelled while an occurrence ran; the series ends when that occurrence settles.
	Ending bool
}

// Entry is a task as stored, with the revision a CAS update must name.
type Entry struct {
	Task     Task
	Revision uint64
	// Partial: only the record's state was loaded, not its payload (a JetStore watch's initial
	// values, read from the records' headers). Task.Payload is empty and every other field is the
	// record's, Header included. Such an entry may decide what to do with a task, but it must never
	// be written back or published: read the record (Get, GetMany) for that.
	Partial bool
}

// Partition returns the partition of a task id: FNV-1a 32 of the id modulo n. It is stable across
// versions and processes; changing it would orphan every stored key.
func Partition(id string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() % uint32(n))
}

// EventKind says what a watch event carries.
type EventKind uint8

const (
	// EventPut: a record was created or updated; Entry holds it (before EventInitDone perhaps
	// without its payload, see Entry.Partial).
	EventPut EventKind = iota + 1
	// EventDelete: a record was deleted; only ID and Revision are set.
	EventDelete
	// EventInitDone: every record that existed when the watch started has been delivered.
	EventInitDone
	// EventError: a stored value could not be decoded (Err says why; ID and Revision are set).
	EventError
)

// Event is one change seen by a Watcher.
type Event struct {
	Kind     EventKind
	ID       string
	Revision uint64
	Entry    Entry // EventPut only
	Err      error // EventError only (wraps ErrCorrupt or ErrUnknownVersion)
}
