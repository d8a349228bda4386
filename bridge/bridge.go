package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

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
}

// Bridge is one replica of the service. Several may run on one bucket and stream: every state
// change is a CAS on the task's revision, so they never fire a task twice within one lease.
type Bridge struct {
	cfg   Config
	nc    *nats.Conn
	js    jetstream.JetStream
	store Store
	log   *slog.Logger
	m     *metrics
	fired *inflight // records this replica claimed, for a read-free ack

	mu       sync.Mutex
	state    int // 0 new, 1 started, 2 stopped
	stopped  chan struct{}
	stopLoop context.CancelFunc // ends the scheduling loop (and with it the workers' job supply)
	stopWork context.CancelFunc // ends the workers' store calls; last thing Stop does
	consume  jetstream.ConsumeContext
	ackSub   *nats.Subscription // queue group on ax.ack.>: any replica applies an ack
	nrSub    *nats.Subscription // plain sub on this replica's ack subjects: receives no-responders
	api      micro.Service      // the task API: get, cancel, requeue

	jobs      chan job       // loop → workers
	results   chan result    // workers → loop
	acks      chan ackReq    // ack subscriptions → ack workers
	intake    sync.WaitGroup // schedule messages between delivery and their store outcome
	workers   sync.WaitGroup // workers and ack workers
	pipelined sync.WaitGroup // pipelined claims and acks between their write and its completion
	loopEnd   chan struct{}  // closed when the loop returns
	acksEnd   chan struct{}  // closed by Stop once no more acks can arrive on acks
	ready     chan struct{}  // closed when the initial load of the bucket is indexed

	outage *outageLog // store failures of task steps, logged once per change of state
}

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
	return &Bridge{
		cfg: cfg, nc: nc, js: js, store: store, log: cfg.Logger,
		m:       newMetrics(cfg.Registerer),
		fired:   newInflight(),
		outage:  newOutageLog(cfg.Logger),
		stopped: make(chan struct{}),
		jobs:    make(chan job),
		results: make(chan result, 1024),
		acks:    make(chan ackReq, 4096),
		loopEnd: make(chan struct{}),
		acksEnd: make(chan struct{}),
		ready:   make(chan struct{}),
	}, nil
}

// ReplicaID names this replica in ack subjects and task records.
func (b *Bridge) ReplicaID() string { return b.cfg.ReplicaID }

// Ready is closed once the records that existed at Start are indexed (recovery done).
func (b *Bridge) Ready() <-chan struct{} { return b.ready }

// Start makes sure the intake stream and consumer exist, subscribes to acks, starts watching the
// bucket and begins taking schedule messages. It returns once all of that is set up; the work goes
// on in the background until Stop. Calling Start twice is an error.
func (b *Bridge) Start(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != 0 {
		return errors.New("bridge: already started")
	}
	cons, err := b.ensureIntake(ctx)
	if err != nil {
		return err
	}
	loopCtx, stopLoop := context.WithCancel(context.Background())
	w, err := b.store.Watch(loopCtx)
	if err != nil {
		stopLoop()
		return fmt.Errorf("bridge: watch tasks: %w", err)
	}
	if err := b.subscribeAcks(); err != nil {
		stopLoop()
		_ = w.Stop()
		return fmt.Errorf("bridge: subscribe to acks: %w", err)
	}
	workCtx, stopWork := context.WithCancel(context.Background())
	b.stopLoop, b.stopWork = stopLoop, stopWork
	b.state = 1

	go b.loop(loopCtx, w)
	for range b.cfg.Workers {
		b.workers.Add(1)
		go b.worker(workCtx)
	}
	for range b.cfg.AckWorkers {
		b.workers.Add(1)
		go b.ackWorker(workCtx)
	}
	if b.api, err = b.startAPI(workCtx); err != nil {
		b.mu.Unlock()
		_ = b.Stop(ctx)
		b.mu.Lock()
		return fmt.Errorf("bridge: task API: %w", err)
	}
	b.consume, err = cons.Consume(b.onSchedule, jetstream.PullMaxMessages(2000),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			b.log.Debug("intake consumer", "err", err)
		}))
	if err != nil {
		b.mu.Unlock()
		_ = b.Stop(ctx)
		b.mu.Lock()
		return fmt.Errorf("bridge: consume %s: %w", b.cfg.Stream, err)
	}
	b.log.Info("bridge started", "replica", b.cfg.ReplicaID, "stream", b.cfg.Stream, "consumer", b.cfg.Consumer)
	return nil
}

// Stop stops taking schedule messages, waits for those in flight to be stored, stops the
// scheduling loop, applies the acks already received and waits for in-flight claims and fires, all
// bounded by ctx. Tasks not yet fired stay in the store for the next replica or restart.
// Stop is idempotent.
func (b *Bridge) Stop(ctx context.Context) error {
	b.mu.Lock()
	switch b.state {
	case 0:
		b.state = 2
		close(b.stopped)
		fallthrough
	case 2:
		b.mu.Unlock()
		<-b.stopped
		return nil
	}
	b.state = 2
	b.mu.Unlock()
	defer close(b.stopped)
	defer b.stopWork()

	var errs []error
	if b.api != nil {
		_ = b.api.Stop()
	}
	if b.consume != nil {
		b.consume.Drain()
		select {
		case <-b.consume.Closed():
		case <-ctx.Done():
			b.consume.Stop()
		}
	}
	if !waitCtx(ctx, &b.intake) {
		errs = append(errs, errors.New("schedule messages still being stored"))
	}
	// The loop closes the job channel as it returns; workers finish the jobs they hold.
	b.stopLoop()
	<-b.loopEnd
	// Drain delivers the acks the server already sent, then closes the subscription.
	closed := b.ackSub.StatusChanged(nats.SubscriptionClosed)
	if err := b.ackSub.Drain(); err == nil {
		select {
		case <-closed:
		case <-ctx.Done():
			_ = b.ackSub.Unsubscribe()
		}
	}
	close(b.acksEnd)
	if !waitCtx(ctx, &b.workers) || !waitCtx(ctx, &b.pipelined) {
		errs = append(errs, errors.New("claims and acks still in flight"))
	}
	_ = b.nrSub.Unsubscribe()
	b.log.Info("bridge stopped", "replica", b.cfg.ReplicaID)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bridge stop: %w: %w", err, ctx.Err())
	}
	return nil
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
