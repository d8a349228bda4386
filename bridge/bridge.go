package bridge

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/bridge/internal/membership"
	"github.com/axbridge/axbridge/kvstore"
)

// Store is what the bridge needs from the task store. *kvstore.JetStore implements it on a
// JetStream KV bucket and *kvstore.MemStore in memory, with the same CAS semantics.
type Store interface {
	CreateAsync(ctx context.Context, t *kvstore.Task, done func(kvstore.Entry, error))
	UpdateAsync(ctx context.Context, t *kvstore.Task, rev uint64, done func(uint64, error))
	Get(ctx context.Context, id string) (kvstore.Entry, error)
	GetMany(ctx context.Context, ids []string) ([]kvstore.Entry, error)
	Update(ctx context.Context, t *kvstore.Task, rev uint64) (uint64, error)
	Delete(ctx context.Context, id string, rev uint64) error
	Watch(ctx context.Context, partitions ...int) (kvstore.Watcher, error)
	Partitions() int
}

// Bridge is one replica of the service. Several may run on one bucket and stream: they divide the
// bucket's partitions (members.go), and every state change is a CAS on the task's revision, so
// they never fire a task twice within one lease, even while partitions move.
type Bridge struct {
	// Set by New, read-only after it.
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	store  Store
	log    *slog.Logger
	m      *metrics
	nparts int // the bucket's partition count
	// acklog: the ack log, set by the acks service's Start before any worker runs; read by the
	// workers' lease steps.
	acklog ackLog

	// Shared between goroutines, each guarded by its own lock.
	// fired: the records this replica claimed, for a read-free ack. Written by claim completions
	// (put) and ack workers (take, put back), dropped by the loop and the membership goroutine.
	fired *inflight
	// hand: acks received and not yet written or found stale, so the lease waits for them.
	// Written by ack workers, read by the workers' lease steps.
	hand attemptHolds
	// out: claims written and not yet answered, whose attempts nobody published. Written by
	// fire workers and claim completions, read by the workers' lease steps.
	out attemptHolds
	// outage: store failures of task steps. Written by workers and ack paths, ticked by the loop.
	outage *outageLog
	// settle: room for pipelined acks whose write failed. Written by write completions, read
	// by the settle workers.
	settle *settleQueue

	// mu guards the lifecycle state; it is never held across a network call.
	mu          sync.Mutex
	state       lifecycle
	cancelStart context.CancelFunc // ends a Start in progress (Stop during Start)
	startErr    error              // why Start failed; read after startDone
	startDone   chan struct{}      // closed when Start has returned or failed
	stopped     chan struct{}      // closed when everything Start began has ended

	// Written by Start before anything runs, read by Stop after startDone.
	svc      bridgeServices
	started  int                // services whose Start was called
	workCtx  context.Context    // the workers' and the API's store calls; read by the services
	stopWork context.CancelFunc // ends workCtx; the last thing Stop does

	// Channels, each written by one role and read by another.
	jobs       chan job            // loop → fire workers; closed by the loop as it returns
	results    chan result         // fire workers, claim completions → loop
	acks       chan ackReq         // ack subscriptions → ack workers
	intakeErrs chan error          // consumer error handler → runIntakeFrom: check the consumer still exists
	loopEnd    chan struct{}       // closed by the loop as it returns; read by Stop
	intakeEnd  chan struct{}       // closed by runIntakeFrom as it returns; read by Stop
	acksEnd    chan struct{}       // closed by Stop once no more acks can arrive on acks; read by ack paths
	ready      chan struct{}       // closed by the loop once the initial load is indexed; read by users
	census     chan censusQuestion // census subscription → loop (census.go)

	// Work between its start and its completion, waited for by Stop.
	intake    sync.WaitGroup // schedule messages between delivery and their store outcome
	claims    sync.WaitGroup // pipelined claims between their write and its completion (and fire)
	pipelined sync.WaitGroup // pipelined acks between their write and its completion or settling
	settlers  sync.WaitGroup // settle workers; they end with workCtx

	intakeMu     sync.Mutex   // guards intakeClosed against intake.Add
	intakeClosed bool         // set by Stop: it no longer waits for new schedule messages
	maxDeliver   atomic.Int64 // the intake consumer's max deliver; written by intake setup, read by handlers
	intakeOutage storeOutage  // intake's store failures; written and read by intake handlers (own lock)
	replay       replayGuard  // refuses replayed schedules of tasks that may have retired; intake handlers

	// Membership and ownership (members.go, package membership). Written by the membership
	// goroutine through its callbacks unless said otherwise.
	members     Membership                       // set by New or Start's join
	own         atomic.Pointer[ownership]        // read by everyone
	ownChanged  chan struct{}                    // membership goroutine → loop: the owned set changed (capacity 1)
	house       atomic.Bool                      // this replica is the housekeeper; read by the purge loop and metrics
	liveMembers atomic.Int64                     // live replicas in this replica's view, itself included
	rank        atomic.Int64                     // this replica's place among them, sorted by id
	biz         *bizTable                        // the bizType settings (biz.go)
	alarm       *alarms                          // the lateness alarm's counts and state (alarm.go)
	oldestDue   atomic.Pointer[map[string]int64] // by bizType: its most overdue task's due time; written by the loop
	ackSub      map[int]*nats.Subscription       // ack subscriptions by partition; read by Stop once the member stopped
	member      *membership.Member               // set by Start, stopped by Stop
	membersRun  sync.WaitGroup                   // the intake purge loop
	stopMembers context.CancelFunc               // ends it
}

// lifecycle is a Bridge's state: new → starting → running → stopping → stopped.
type lifecycle uint8

const (
	stateNew lifecycle = iota
	stateStarting
	stateRunning
	stateStopping
	stateStopped
)

// New checks cfg and returns a bridge that uses nc for NATS and store for task records.
func New(nc *nats.Conn, store Store, cfg Config) (*Bridge, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if nc == nil || store == nil {
		return nil, errors.New("bridge: a NATS connection and a store are required")
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("bridge: %w", err)
	}
	b := &Bridge{
		cfg: cfg, nc: nc, js: js, store: store, log: cfg.Logger,
		m:          newMetrics(cfg.Registerer),
		fired:      newInflight(),
		settle:     newSettleQueue(settleQueueLen, settleQueueBytes),
		outage:     newOutageLog(cfg.Logger),
		startDone:  make(chan struct{}),
		stopped:    make(chan struct{}),
		jobs:       make(chan job),
		results:    make(chan result, 1024),
		acks:       make(chan ackReq, 4096),
		intakeErrs: make(chan error, 1),
		loopEnd:    make(chan struct{}),
		intakeEnd:  make(chan struct{}),
		acksEnd:    make(chan struct{}),
		ready:      make(chan struct{}),
		members:    cfg.Members,
		nparts:     store.Partitions(),
		ownChanged: make(chan struct{}, 1),
		census:     make(chan censusQuestion),
		biz:        newBizTable(),
		alarm:      newAlarms(),
	}
	b.cfg.biz = b.biz
	b.svc = bridgeServices{acks: acksService{b: b, cfg: cfg.acks()}, members: membersService{b: b, cfg: cfg.members()},
		biz: bizService{b: b}, sched: schedService{b: b, cfg: cfg.sched()}, api: apiService{b: b}, intake: intakeService{b: b, cfg: cfg.intake()}}
	b.m.members = newMemberMetrics(b, cfg.Registerer)
	b.maxDeliver.Store(int64(cfg.IntakeMaxDeliver))
	if r, ok := store.(interface{ Retention() time.Duration }); ok {
		b.replay.on, b.replay.after = true, max(r.Retention().Truncate(time.Second)-cfg.LeaseSkew, 0)
	}
	return b, nil
}

// ReplicaID names this replica in the members bucket, task records and its fires' Ax-Replica.
func (b *Bridge) ReplicaID() string { return b.cfg.ReplicaID }

// Ready is closed once the records that existed at Start are indexed (recovery done). It never
// closes if the bridge stops first: wait on Stopped too.
func (b *Bridge) Ready() <-chan struct{} { return b.ready }

// Stopped is closed once Stop has ended everything Start began (or a failed Start has cleaned
// up). Ready never closes for a bridge that stops before its initial load is done: wait on both.
func (b *Bridge) Stopped() <-chan struct{} { return b.stopped }

// Start makes sure the intake stream and consumer exist, subscribes to acks, starts watching the
// bucket and begins taking schedule messages. It returns once all of that is set up; the work goes
// on in the background until Stop. Every network call is bounded by ctx, or by 10s when ctx has no
// deadline, and a Stop during Start ends it. Calling Start twice is an error; after a failed Start
// the bridge is stopped.
func (b *Bridge) Start(ctx context.Context) error {
	b.mu.Lock()
	if b.state != stateNew {
		b.mu.Unlock()
		return errors.New("bridge: already started")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b.state, b.cancelStart = stateStarting, cancel
	b.mu.Unlock()

	err := b.start(ctx)

	b.mu.Lock()
	b.startErr = err
	if err == nil && b.state == stateStarting {
		b.state = stateRunning
	}
	close(b.startDone)
	b.mu.Unlock()
	if err != nil {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = b.shutdown(sctx)
		scancel()
		b.mu.Lock()
		b.state = stateStopped
		b.mu.Unlock()
		close(b.stopped)
		return err
	}
	b.log.Info("bridge started", "replica", b.cfg.ReplicaID, "stream", b.cfg.Stream, "consumer", b.cfg.Consumer)
	return nil
}

// start does Start's work: it starts the services in order; whatever it began, shutdown ends.
func (b *Bridge) start(ctx context.Context) error {
	b.workCtx, b.stopWork = context.WithCancel(context.Background())
	for _, s := range b.services() {
		b.started++
		if err := s.Start(ctx); err != nil {
			return err
		}
	}
	return nil
}

// join opens the membership bucket unless Config.Members gave one, announces this replica and
// computes the partitions it owns (members.go); the goroutines that keep that up run until Stop.
func (b *Bridge) join(ctx context.Context, cfg membersConfig) error {
	if b.members == nil {
		bucket := cmp.Or(b.cfg.MembersBucket, b.sideBucket("_MEMBERS"))
		mctx, cancel := withDefaultTimeout(ctx)
		var m *kvstore.Members
		err := openRetrying(mctx, b, "the members bucket "+bucket, func(ctx context.Context) (err error) {
			m, err = kvstore.OpenMembers(ctx, b.js, kvstore.MembersConfig{Bucket: bucket, Replicas: b.cfg.StreamReplicas})
			return err
		})
		cancel()
		if err != nil {
			return fmt.Errorf("bridge: %w", err)
		}
		b.members = m
	}
	membersCtx, stopMembers := context.WithCancel(context.Background())
	b.stopMembers = stopMembers
	if err := b.startMembers(ctx, membersCtx, cfg); err != nil {
		return fmt.Errorf("bridge: join the replicas: %w", err)
	}
	return nil
}

// watch starts the loop's watch of partitions parts (which lives as long as loopCtx), waiting at
// most as long as ctx allows, or 10s when ctx has no deadline. If ctx ends first, a Watch call
// that returns later is stopped as soon as it does (the caller then cancels loopCtx, which ends it).
func (b *Bridge) watch(ctx, loopCtx context.Context, parts []int) (kvstore.Watcher, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	type watched struct {
		w   kvstore.Watcher
		err error
	}
	ch := make(chan watched, 1)
	go func() {
		w, err := b.store.Watch(loopCtx, parts...)
		ch <- watched{w, err}
	}()
	select {
	case r := <-ch:
		return r.w, r.err
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.w != nil {
				_ = r.w.Stop()
			}
		}()
		return nil, ctx.Err()
	}
}

// Stop stops taking schedule messages, waits for those in flight to be stored, stops the
// scheduling loop, waits for in-flight claims (so their fires go out while acks are still taken),
// then stops taking acks, applies those received, and stops the workers, all bounded by ctx.
// Tasks not yet fired stay in the store for the next replica or restart. A Stop during Start ends
// the Start. Stop is idempotent.
func (b *Bridge) Stop(ctx context.Context) error {
	b.mu.Lock()
	switch b.state {
	case stateNew:
		b.state = stateStopped
		close(b.startDone)
		close(b.stopped)
		b.mu.Unlock()
		return nil
	case stateStarting:
		b.state = stateStopping
		b.cancelStart()
	case stateRunning:
		b.state = stateStopping
	default:
		b.mu.Unlock()
		select {
		case <-b.stopped:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("bridge stop: %w", ctx.Err())
		}
	}
	b.mu.Unlock()

	select {
	case <-b.startDone:
	case <-ctx.Done():
		return fmt.Errorf("bridge stop: start still ending: %w", ctx.Err())
	}
	if b.startErr != nil { // Start ends what it began itself
		select {
		case <-b.stopped:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("bridge stop: %w", ctx.Err())
		}
	}
	err := b.shutdown(ctx)
	b.mu.Lock()
	b.state = stateStopped
	b.mu.Unlock()
	close(b.stopped)
	b.log.Info("bridge stopped", "replica", b.cfg.ReplicaID)
	return err
}

// shutdown stops the services start began, in reverse, each bounded by ctx, then ends the
// workers' store calls.
func (b *Bridge) shutdown(ctx context.Context) error {
	var errs []error
	svcs := b.services()
	for i := b.started - 1; i >= 0; i-- {
		if err := svcs[i].Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if b.stopWork != nil {
		b.stopWork()
	}
	if !waitCtx(ctx, &b.settlers) {
		errs = append(errs, errors.New("settle workers still running"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bridge stop: %w: %w", err, ctx.Err())
	}
	return nil
}

// handOverAcks keeps the ack subscriptions of a stopping replica until the others can have
// subscribed to its partitions' acks: they do once they see its leave (left), or its key expire a
// lease after its last heartbeat. Acks sent meanwhile are applied here, not lost (review N4). It
// takes at most half of what ctx has left, and nothing when no other replica is alive.
func (b *Bridge) handOverAcks(ctx context.Context, subs []*nats.Subscription, left bool) {
	if len(subs) == 0 || b.liveMembers.Load() <= 1 {
		return
	}
	grace := b.cfg.PartitionLease
	if left {
		grace = b.fenceMargin()
	}
	if d, ok := ctx.Deadline(); ok {
		grace = min(grace, time.Until(d)/2)
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func waitCtx(ctx context.Context, wg *sync.WaitGroup) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}
