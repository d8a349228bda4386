package kvstore

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/axbridge/axbridge/kvstore/record"
)

// The record types live in package record, which imports no NATS package.
type (
	Status = record.Status
	Task   = record.Task
	Entry  = record.Entry
)

// The task states (record.Status).
const (
	StatusWaiting   = record.StatusWaiting
	StatusRunning   = record.StatusRunning
	StatusSuccess   = record.StatusSuccess
	StatusDead      = record.StatusDead
	StatusCancelled = record.StatusCancelled
)

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

// Partition returns the partition of a task id (record.Partition).
func Partition(id string, n int) int { return record.Partition(id, n) }

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
