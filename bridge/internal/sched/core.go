package sched

import (
	"cmp"
	"time"

	"github.com/axbridge/axbridge/kvstore/record"
)

const (
	// preReadBatch is how many records one pre-read job reads at once.
	preReadBatch = 256
	// MaxQueued bounds each of the two job queues (fires; lease ends and pre-reads): the core
	// takes due steps from its index only while its queue has room.
	MaxQueued = 512
	// flightStale is how long a step handed to the workers counts as in progress for the
	// reconciler; a step that has not changed its record by then is repaired.
	flightStale = 30 * time.Second
	// houseEvery is how many fires go out before a waiting lease end or pre-read: fires come
	// first, but a backlog of overdue fires must not hold back lease expiries for good.
	houseEvery = 8
	// maxPublishTurn bounds the held fires published in one turn.
	maxPublishTurn = 1024
	// maxReadsOut bounds the PreRead jobs in workers' hands: a burst entering the pre-read window
	// must not take every worker from the fires due now (another bizType's among them).
	maxReadsOut = 4
)

// flight is a step taken from the index and not yet seen through: the revision it was taken at,
// whether it still waits in a job queue, when (monotonic) a worker took it, and when the task was
// due (UTC Unix ms; a fire's first due time, kept across retries).
type flight struct {
	rev    uint64
	queued bool
	claim  bool // a fire in a worker's hands, counted against the claim budget (budget.go)
	fire   bool // a fire: counted in flight for its lane's limits (limits.go) until it ends
	at     time.Time
	due    int64
	tag    uint32 // the task's bizType (Core.tagOf), to index it again
}

// task is what the core holds of one task besides its index entry; a task with none of it has
// no task struct.
type task struct {
	fl       flight
	flying   bool          // fl is set
	retry    bool          // a fire put back after a failed store call ...
	retryDue int64         // ... and when it was first due: it stays overdue meanwhile
	unsure   uint64        // the token of a claim whose outcome was unknown, or 0
	held     *record.Entry // a claim landed ahead of its due time, indexed as Publish
	behind   int           // reads so far that lagged the indexed revision
	near     *record.Entry // the record with its payload, due within PreRead
	lane     int           // the fire queue it was taken from (its bizType's), for a fire put back
}

// Core is the scheduling state machine. It is not safe for concurrent use: one goroutine owns it.
type Core struct {
	cfg   Config
	now   Time
	idx   *slots
	tasks map[string]*task

	nearN, nearBytes int   // records held in tasks' near, and their bytes
	heldN            int   // tasks with a held claim
	fires, house     []Job // jobs no worker has taken yet: fires in deadline order; lease ends and pre-reads
	reads            []string
	fromHouse        bool // the job Next returned is the head of house, not of fires
	firesInRow       int  // fires handed out since the last housekeeping job
	readsOut         int  // PreRead jobs handed out and not yet reported (maxReadsOut)

	claims    []claimOut // fires handed to workers, oldest first; some are over (budget.go)
	claimsN   int        // those still counted against the claim budget
	loading   bool       // a watch is loading partitions (SetLoading)
	connected bool       // the connection to NATS was up at the last Take

	ahead      time.Duration // the claim-ahead window (SetAhead)
	aheadUntil int64         // UTC Unix ms: the latest due time of a fire handed out ahead of it
	owned      []bool        // by partition: the partitions this core indexes
	lim        limits        // per-bizType limits and what they count (limits.go)
	pausedDue  int           // due fires in paused lanes, at the last Overdue
	lastPrune  time.Time
	ready      Ready
	census     census // the bizTypes' numbers and the DEAD records (census.go)
}

// New returns a core owning the partitions in owned, at time now.
func New(cfg Config, owned []int, now Time) *Core {
	cfg.MaxClaims = cmp.Or(cfg.MaxClaims, DefaultMaxClaims)
	c := &Core{cfg: cfg, now: now, idx: newSlots(cfg.PreRead), tasks: make(map[string]*task),
		owned: make([]bool, cfg.Partitions), lastPrune: now.Mono, connected: true, lim: newLimits(), census: newCensus()}
	for _, p := range owned {
		c.owned[p] = true
	}
	return c
}

// Now sets the core's reading of the clocks; every later input is judged by it.
func (c *Core) Now(t Time) {
	c.now = t
	c.idx.advance(t.Ms, c.preRead)
}

// SetAhead sets the claim-ahead window: a fire due within it may be taken and claimed at once.
func (c *Core) SetAhead(d time.Duration) { c.ahead = d }

// Ready returns what the caller is to do, collected since the last call.
func (c *Core) Ready() Ready {
	r := c.ready
	c.ready = Ready{}
	return r
}

// Len is the number of indexed tasks.
func (c *Core) Len() int { return c.idx.len() }

// Stats returns the core's bounded state.
func (c *Core) Stats() Stats {
	return Stats{Queued: len(c.fires) + len(c.house), PreRead: c.nearN, PreReadBytes: c.nearBytes,
		Indexed: c.idx.len(), Held: c.heldN, Tasks: len(c.tasks)}
}

// ensure returns id's task struct, adding one if it has none.
func (c *Core) ensure(id string) *task {
	t := c.tasks[id]
	if t == nil {
		t = &task{}
		c.tasks[id] = t
	}
	return t
}

// tidy drops id's task struct once nothing is left in it.
func (c *Core) tidy(id string) {
	if t, ok := c.tasks[id]; ok && *t == (task{}) {
		delete(c.tasks, id)
	}
}

// setHeld holds e, a landed claim of t's task, for its due time; nil drops the one held.
func (c *Core) setHeld(t *task, e *record.Entry) {
	switch {
	case t.held == nil && e != nil:
		c.heldN++
	case t.held != nil && e == nil:
		c.heldN--
	}
	t.held = e
}

// OwnClaim reports whether t is RUNNING under replica's claim with token rev.
func OwnClaim(t *record.Task, replica string, rev uint64) bool {
	return t.Status == record.StatusRunning && t.Owner == replica && t.Claim == rev
}

// LeaseDue is when a RUNNING task's lease counts as ended at replica: at LeaseUntil for its
// owner, skew later for any other replica, whose clock may run ahead of the owner's.
func LeaseDue(t *record.Task, replica string, skew time.Duration) int64 {
	if t.Owner == replica {
		return t.LeaseUntil
	}
	return record.AddMs(t.LeaseUntil, skew)
}

func (c *Core) leaseDue(t *record.Task) int64 { return LeaseDue(t, c.cfg.Replica, c.cfg.LeaseSkew) }

// recordOverhead is roughly what a held record costs besides its payload and headers: the Entry,
// its strings and the map entry.
const recordOverhead = 384

// RecordBytes is what holding a record in memory costs, roughly.
func RecordBytes(t *record.Task) int {
	n := recordOverhead + len(t.Payload) + len(t.ID) + len(t.BizType) + len(t.LastError)
	for k, vs := range t.Header {
		n += len(k)
		for _, v := range vs {
			n += len(v)
		}
	}
	return n
}
