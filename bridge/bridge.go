package bridge

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

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
	cfg   Config
	nc    *nats.Conn
	js    jetstream.JetStream
	store Store
	log   *slog.Logger
	m     *metrics
	fired *inflight    // records this replica claimed, for a read-free ack
	hand  attemptHolds // acks received and not yet written or found stale: the lease waits for them
	out   attemptHolds // claims written and not yet answered: nobody published their attempts

	// mu guards the lifecycle state; it is never held across a network call.
	mu          sync.Mutex
	state       lifecycle
	cancelStart context.CancelFunc // ends a Start in progress (Stop during Start)
	startErr    error              // why Start failed; read after startDone
	startDone   chan struct{}      // closed when Start has returned or failed
	stopped     chan struct{}      // closed when everything Start began has ended

	// Set by Start before anything runs, read by Stop after startDone.
	stopIntake context.CancelFunc   // ends runIntake, which drains the intake consumer
	stopLoop   context.CancelFunc   // ends the scheduling loop (and with it the workers' job supply)
	stopWork   context.CancelFunc   // ends the workers' store calls; last thing Stop does
	watcher    kvstore.Watcher      // the loop's watch, until the loop runs
	ackSubs    []*nats.Subscription // the ack subscriptions, once the membership goroutine ended
	advSub     *nats.Subscription   // the intake consumer's max-deliveries advisories
	api        micro.Service        // the task API: get, cancel, requeue
	loopRuns   bool                 // the loop goroutine was started (loopEnd will close)
	intakeRuns bool                 // runIntake was started (intakeEnd will close)

	jobs        chan job       // loop → workers
	results     chan result    // workers → loop
	acks        chan ackReq    // ack subscriptions → ack workers
	intakeErrs  chan error     // consumer error handler → runIntake: check the consumer still exists
	intake      sync.WaitGroup // schedule messages between delivery and their store outcome
	workers     sync.WaitGroup // workers and ack workers
	fireWorkers sync.WaitGroup // workers alone: once they are done, no claim starts
	claims      sync.WaitGroup // pipelined claims between their write and its completion (and fire)
	pipelined   sync.WaitGroup // pipelined acks between their write and its completion
	loopEnd     chan struct{}  // closed when the loop returns
	intakeEnd   chan struct{}  // closed when runIntake returns
	acksEnd     chan struct{}  // closed by Stop once no more acks can arrive on acks
	ready       chan struct{}  // closed when the initial load of the bucket is indexed

	intakeMu     sync.Mutex // guards intakeClosed against intake.Add
	intakeClosed bool       // Stop no longer waits for new schedule messages
	maxDeliver   atomic.Int64
	intakeOutage storeOutage

	outage *outageLog // store failures of task steps, logged once per change of state

	// Membership and ownership (members.go, package membership). Written by the membership
	// goroutine through its callbacks unless said otherwise.
	members     Membership
	nparts      int                        // the bucket's partition count
	own         atomic.Pointer[ownership]  // read by everyone
	ownChanged  chan struct{}              // membership goroutine → loop: the owned set changed (capacity 1)
	house       atomic.Bool                // this replica is the housekeeper; read by the purge loop and metrics
	liveMembers atomic.Int64               // live replicas in this replica's view, itself included
	ackSub      map[int]*nats.Subscription // ack subscriptions by partition; read by Stop once the member stopped
	member      *membership.Member         // set by Start, stopped by Stop
	membersRun  sync.WaitGroup             // the intake purge loop
	stopMembers context.CancelFunc         // ends it
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
	}
	b.m.members = newMemberMetrics(b, cfg.Registerer)
	b.maxDeliver.Store(int64(cfg.IntakeMaxDeliver))
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

// start does Start's work; whatever it began, shutdown ends.
func (b *Bridge) start(ctx context.Context) error {
	cons, err := b.ensureIntake(ctx)
	if err != nil {
		return err
	}
	loopCtx, stopLoop := context.WithCancel(context.Background())
	workCtx, stopWork := context.WithCancel(context.Background())
	b.stopLoop, b.stopWork = stopLoop, stopWork
	if err := b.join(ctx); err != nil {
		return err
	}
	parts := b.own.Load().owned()
	if len(parts) > 0 { // a watch of no partitions would be a watch of all
		if b.watcher, err = b.watch(ctx, loopCtx, parts); err != nil {
			return fmt.Errorf("bridge: watch tasks: %w", err)
		}
	}

	w := b.watcher
	b.watcher, b.loopRuns = nil, true
	go b.loop(loopCtx, w, parts)
	for range b.cfg.Workers {
		b.workers.Add(1)
		b.fireWorkers.Add(1)
		go func() {
			defer b.fireWorkers.Done()
			b.worker(workCtx)
		}()
	}
	for range b.cfg.AckWorkers {
		b.workers.Add(1)
		go b.ackWorker(workCtx)
	}
	if b.api, err = b.startAPI(workCtx); err != nil {
		return fmt.Errorf("bridge: task API: %w", err)
	}
	if b.advSub, err = b.watchMaxDeliveries(); err != nil {
		return fmt.Errorf("bridge: subscribe to intake advisories: %w", err)
	}
	// The server has the ack and API subscriptions once Start returns: an ack or request sent
	// right after is not lost in between.
	fctx, fcancel := withDefaultTimeout(ctx)
	err = b.nc.FlushWithContext(fctx)
	fcancel()
	if err != nil {
		return fmt.Errorf("bridge: start: flush subscriptions: %w", err)
	}
	if err := ctx.Err(); err != nil { // a Stop came while the steps above ran
		return fmt.Errorf("bridge: start: %w", err)
	}
	intakeCtx, stopIntake := context.WithCancel(context.Background())
	b.stopIntake, b.intakeRuns = stopIntake, true
	cc, err := b.consume(cons)
	if err != nil {
		b.log.Warn("intake: consume failed; retrying", "stream", b.cfg.Stream, "err", err)
		cons = nil
	}
	go b.runIntakeFrom(intakeCtx, cons, cc)
	return nil
}

// join opens the membership bucket unless Config.Members gave one, announces this replica and
// computes the partitions it owns (members.go); the goroutines that keep that up run until Stop.
func (b *Bridge) join(ctx context.Context) error {
	if b.members == nil {
		bucket := b.cfg.MembersBucket
		if named, ok := b.store.(interface{ Bucket() string }); ok && bucket == "" {
			bucket = named.Bucket() + "_MEMBERS"
		}
		bucket = cmp.Or(bucket, strings.ToUpper(b.cfg.Prefix)+"_TASKS_MEMBERS")
		mctx, cancel := withDefaultTimeout(ctx)
		m, err := kvstore.OpenMembers(mctx, b.js, kvstore.MembersConfig{Bucket: bucket, Replicas: b.cfg.StreamReplicas})
		cancel()
		if err != nil {
			return fmt.Errorf("bridge: %w", err)
		}
		b.members = m
	}
	membersCtx, stopMembers := context.WithCancel(context.Background())
	b.stopMembers = stopMembers
	if err := b.startMembers(ctx, membersCtx); err != nil {
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

// shutdown ends whatever start began, in order, bounded by ctx.
func (b *Bridge) shutdown(ctx context.Context) error {
	var errs []error
	if b.api != nil {
		_ = b.api.Stop()
	}
	if b.advSub != nil {
		_ = b.advSub.Unsubscribe()
	}
	if b.intakeRuns {
		b.stopIntake()
		select {
		case <-b.intakeEnd:
		case <-ctx.Done():
			errs = append(errs, errors.New("intake consumer still draining"))
		}
	}
	b.closeIntake()
	if !waitCtx(ctx, &b.intake) {
		errs = append(errs, errors.New("schedule messages still being stored"))
	}
	// The loop closes the job channel as it returns; workers finish the jobs they hold.
	if b.stopLoop != nil {
		b.stopLoop()
	}
	if b.watcher != nil {
		_ = b.watcher.Stop()
	}
	if b.loopRuns {
		select {
		case <-b.loopEnd:
		case <-ctx.Done():
			errs = append(errs, errors.New("scheduling loop still running"))
		}
	}
	// Claims in flight publish their fires; replies to them must still find the ack subscriptions.
	b.log.Debug("stop: waiting for claims in flight before taking no more acks")
	if !waitCtx(ctx, &b.fireWorkers) || !waitCtx(ctx, &b.claims) {
		errs = append(errs, errors.New("claims still in flight"))
	}
	// No more claims: stop heartbeating and leave, so that the others take the partitions over at
	// once. The ack subscriptions stay until the acks already sent are applied.
	if b.member != nil {
		left, err := b.stopMember(ctx)
		if err != nil {
			errs = append(errs, err)
		} else {
			b.ackSubs = b.ackSubscriptions()
		}
		b.handOverAcks(ctx, left)
	}
	// Drain delivers the acks the server already sent, then closes the subscriptions.
	for _, sub := range b.ackSubs {
		closed := sub.StatusChanged(nats.SubscriptionClosed)
		if err := sub.Drain(); err == nil {
			select {
			case <-closed:
			case <-ctx.Done():
				_ = sub.Unsubscribe()
			}
		}
	}
	close(b.acksEnd)
	if !waitCtx(ctx, &b.workers) || !waitCtx(ctx, &b.pipelined) {
		errs = append(errs, errors.New("acks still in flight"))
	}
	if b.stopWork != nil {
		b.stopWork()
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
func (b *Bridge) handOverAcks(ctx context.Context, left bool) {
	if len(b.ackSubs) == 0 || b.liveMembers.Load() <= 1 {
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
