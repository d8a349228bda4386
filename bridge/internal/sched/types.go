package sched

import (
	"strconv"
	"time"

	"github.com/axbridge/axbridge/kvstore/record"
)

// Kind says what a worker does with a task whose index entry came due.
type Kind uint8

const (
	Fire    Kind = iota + 1 // WAITING and due: claim, then publish to ax.fire.<bizType>
	PreRead                 // a job: read the payloads of fires that entered the pre-read window
	Lease                   // RUNNING and the lease ended: count the attempt as failed
	Publish                 // RUNNING, claimed ahead and now due: the caller publishes it (Ready)
)

func (k Kind) String() string {
	switch k {
	case Fire:
		return "fire"
	case PreRead:
		return "preread"
	case Lease:
		return "lease"
	case Publish:
		return "publish"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Job is one unit of work for a worker. Entry is set when the core holds the record's payload;
// a PreRead job carries many ids, read in one batch.
type Job struct {
	Kind  Kind
	ID    string
	Rev   uint64
	Due   int64 // UTC Unix ms the step was due at
	Entry *record.Entry
	IDs   []string
	// Unsure: a claim of revision Rev had an unknown outcome; the fire reads the record back and
	// publishes the attempt if that claim landed (RUNNING under this replica with token Rev).
	Unsure bool
	// Ahead: a fire taken up to this long before due may be claimed at once; Taken is when
	// (monotonic) the core took it, from which the claim's latency is measured.
	Ahead time.Duration
	Taken time.Time
}

// Result is a worker's report to the core: put the task back in the index (retry a failed store
// call later, or a record that is not due yet), or hand over pre-read records.
type Result struct {
	ID      string
	Rev     uint64
	Kind    Kind
	At      int64          // UTC Unix ms at which to try again
	Retry   bool           // a store call failed (the task stays overdue meanwhile)
	Unsure  bool           // the claim of Rev had an unknown outcome: it may have landed
	Behind  bool           // a read returned an older revision than Rev, or none: try again soon
	Created *record.Entry  // a record intake just created: indexed as its watch event would be
	Read    bool           // the report of a PreRead job, with the records it read (Entries; maybe none)
	Entries []record.Entry // pre-read records, with Read
	Held    *record.Entry  // a claim that landed before its task is due: published then
}

// Candidate is a record the reconciler found that should have had its next step by now.
type Candidate struct {
	ID      string
	Rev     uint64
	Kind    Kind  // Fire (WAITING) or Lease (RUNNING)
	Due     int64 // UTC Unix ms
	BizType string
	Series  *record.Series // the record's, if it is a series
}

// Drop tells the fired cache to forget ID unless it holds a revision newer than Rev.
type Drop struct {
	ID  string
	Rev uint64
}

// Ready is what the core asks its caller to do, collected since the last call of Ready.
type Ready struct {
	// Publish: claims held for their due time that are due now, to publish in this order.
	Publish []record.Entry
	// Fenced: held claims due while this replica was fenced, not published (their leases end as
	// after a crash).
	Fenced []record.Entry
	// Drops for the fired cache.
	Drops []Drop
	// Behind: steps whose reads lagged their revision too often, left to the reconciler.
	Behind []string
}

// Stats is the core's bounded state, for gauges.
type Stats struct {
	Queued       int // jobs in the two queues
	PreRead      int // records held with their payload
	PreReadBytes int
	Indexed      int
	Held         int // claims held for their due time
	Tasks        int // tasks with state besides their index entry
}

// Config is what the core needs to know of its replica.
type Config struct {
	Replica    string // this replica's id: the owner of its claims
	Partitions int    // the bucket's partition count
	// PreRead: a WAITING task due within it has its payload read ahead of the fire.
	PreRead time.Duration
	// Bounds of the records held with their payload.
	MaxPreReadTasks int
	MaxPreReadBytes int
	// LeaseSkew: another replica's lease counts as ended this much after its LeaseUntil.
	LeaseSkew time.Duration
	// MaxClaims bounds the fires taken and not yet out (budget.go; default DefaultMaxClaims).
	MaxClaims int
}
