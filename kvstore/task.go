package kvstore

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
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

// Errors returned by every Store implementation. Match them with errors.Is.
var (
	// ErrConflict: the record's revision is not the one the caller named (someone else wrote first),
	// whatever the server said (key exists, wrong last sequence, code 10071 or 10164).
	ErrConflict = errors.New("kvstore: revision conflict")
	// ErrExists: Create found a record under that task id already.
	ErrExists = errors.New("kvstore: task exists")
	// ErrNotFound: no record under that task id (never written, or deleted).
	ErrNotFound = errors.New("kvstore: task not found")
	// ErrInvalidID: the task id cannot be used as a key.
	ErrInvalidID = errors.New("kvstore: invalid task id")
	// ErrCorrupt: a stored value could not be decoded.
	ErrCorrupt = errors.New("kvstore: corrupt record")
	// ErrUnknownVersion: a stored value has an encoding version this build does not know.
	ErrUnknownVersion = errors.New("kvstore: unknown record version")
	// ErrPartitions: the bucket was created with another partition count than configured.
	ErrPartitions = errors.New("kvstore: partition count mismatch")
	// ErrTransition: the state machine refuses the transition from the record's current state.
	ErrTransition = errors.New("kvstore: illegal transition")
)

// MaxIDLen is the longest task id accepted.
const MaxIDLen = 200

// ValidateID reports whether id can be a task id: 1..MaxIDLen characters of [A-Za-z0-9_=-] and
// dots, not starting or ending with a dot and without two dots in a row (so that the key is a valid
// KV key and subject). The error wraps ErrInvalidID and says what is wrong.
func ValidateID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty", ErrInvalidID)
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("%w: %d characters, the limit is %d", ErrInvalidID, len(id), MaxIDLen)
	}
	if id[0] == '.' || id[len(id)-1] == '.' || strings.Contains(id, "..") {
		return fmt.Errorf("%w: %q starts or ends with a dot or has two dots in a row", ErrInvalidID, id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '_', c == '-', c == '=', c == '.':
		default:
			return fmt.Errorf("%w: character %q at %d; allowed are letters, digits, '_', '-', '=' and '.'", ErrInvalidID, c, i)
		}
	}
	return nil
}

// Partition returns the partition of a task id: FNV-1a 32 of the id modulo n. It is stable across
// versions and processes; changing it would orphan every stored key.
func Partition(id string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() % uint32(n))
}

// Key returns the KV key of a task id in a bucket with n partitions: "p<partition>.<id>".
func Key(id string, n int) string {
	return "p" + strconv.Itoa(Partition(id, n)) + "." + id
}

// IDFromKey is the inverse of Key: it strips the partition token.
func IDFromKey(key string) (string, bool) {
	if !strings.HasPrefix(key, "p") {
		return "", false
	}
	_, id, ok := strings.Cut(key, ".")
	return id, ok && id != ""
}

// PartitionFilter is the KV key filter that matches every task of partition p.
func PartitionFilter(p int) string { return "p" + strconv.Itoa(p) + ".>" }
