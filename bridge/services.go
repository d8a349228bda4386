package bridge

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/axbridge/axbridge/kvstore"
)

// service is one background part of a replica. Start sets it up and starts its goroutines,
// returning once it runs; Stop ends them, bounded by ctx. Stop may follow a failed Start, and
// then ends what that Start began. A Bridge starts its services in order and stops them in
// reverse (services).
type service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// services are a replica's parts in the order they start: what takes work comes after what
// finishes it, so that, stopped in reverse, each stops only once nothing can hand it more.
// Intake stops first and stores what it took; the scheduler then fires nothing more and waits
// for its claims; membership leaves, hands its partitions' acks over and drains them; the ack
// workers apply what was taken, last.
func (b *Bridge) services() []service {
	return []service{&b.svc.acks, &b.svc.members, &b.svc.biz, &b.svc.sched, &b.svc.api, &b.svc.intake}
}

// Services, all owned by the goroutine that runs Start and then Stop.
type bridgeServices struct {
	acks    acksService
	members membersService
	biz     bizService
	sched   schedService
	api     apiService
	intake  intakeService
}

// acksService runs the ack workers, which apply the replies the ack subscriptions queue on acks,
// and the settle workers, which read back and apply those whose pipelined write failed.
type acksService struct {
	b       *Bridge
	cfg     acksConfig
	workers sync.WaitGroup
}

func (s *acksService) Start(ctx context.Context) error {
	if err := s.b.openAckLog(ctx, s.cfg); err != nil {
		return err
	}
	for range s.cfg.Workers {
		s.workers.Add(1)
		go func() {
			defer s.workers.Done()
			s.b.ackWorker(s.b.workCtx)
		}()
	}
	for range settleWorkers {
		s.b.settlers.Add(1)
		go s.b.settleWorker(s.b.workCtx)
	}
	return nil
}

// Stop runs once no subscription queues acks any more (membership drained them).
func (s *acksService) Stop(ctx context.Context) error {
	close(s.b.acksEnd)
	if !waitCtx(ctx, &s.workers) || !waitCtx(ctx, &s.b.pipelined) {
		return errors.New("acks still in flight")
	}
	return nil
}

// membersService joins the replicas and keeps the ack subscriptions of the partitions owned.
type membersService struct {
	b   *Bridge
	cfg membersConfig
}

func (s *membersService) Start(ctx context.Context) error { return s.b.join(ctx, s.cfg) }

// Stop leaves the replicas, so that the others take the partitions over at once, and keeps the
// ack subscriptions until they can have subscribed (handOverAcks), then drains them.
func (s *membersService) Stop(ctx context.Context) error {
	b := s.b
	if b.member == nil {
		return nil
	}
	left, err := b.stopMember(ctx)
	if err != nil {
		b.unsubscribeAcks()
		return err
	}
	subs := b.ackSubscriptions()
	b.handOverAcks(ctx, subs, left)
	// Drain delivers the acks the server already sent, then closes the subscription.
	for _, sub := range subs {
		closed := sub.StatusChanged(nats.SubscriptionClosed)
		if err := sub.Drain(); err == nil {
			select {
			case <-closed:
			case <-ctx.Done():
				_ = sub.Unsubscribe()
			}
		}
	}
	return nil
}

// schedService runs the scheduling loop and the fire workers it hands jobs to.
type schedService struct {
	b        *Bridge
	cfg      schedConfig
	stop     context.CancelFunc // ends the loop
	watcher  kvstore.Watcher    // the loop's first watch, until the loop runs
	loopRuns bool               // the loop goroutine was started (loopEnd will close)
	workers  sync.WaitGroup     // the fire workers: once they are done, no claim starts
}

func (s *schedService) Start(ctx context.Context) error {
	b := s.b
	loopCtx, stop := context.WithCancel(context.Background())
	s.stop = stop
	parts := b.own.Load().owned()
	if len(parts) > 0 { // a watch of no partitions would be a watch of all
		var err error
		if s.watcher, err = b.watch(ctx, loopCtx, parts); err != nil {
			return fmt.Errorf("bridge: watch tasks: %w", err)
		}
	}
	w := s.watcher
	s.watcher, s.loopRuns = nil, true
	go b.loop(loopCtx, s.cfg, w, parts)
	for range s.cfg.Workers {
		s.workers.Add(1)
		go func() {
			defer s.workers.Done()
			b.worker(b.workCtx)
		}()
	}
	return nil
}

// Stop ends the loop, which closes the job channel; the workers finish the jobs they hold, and
// the claims in flight publish their fires while the acks to them still find a subscription.
func (s *schedService) Stop(ctx context.Context) error {
	var errs []error
	if s.stop != nil {
		s.stop()
	}
	if s.watcher != nil {
		_ = s.watcher.Stop()
	}
	if s.loopRuns {
		select {
		case <-s.b.loopEnd:
		case <-ctx.Done():
			errs = append(errs, errors.New("scheduling loop still running"))
		}
	}
	s.b.log.Debug("stop: waiting for claims in flight before taking no more acks")
	if !waitCtx(ctx, &s.workers) || !waitCtx(ctx, &s.b.claims) {
		errs = append(errs, errors.New("claims still in flight"))
	}
	return errors.Join(errs...)
}

// apiService answers the task API: get, cancel, requeue. It has no settings of its own.
type apiService struct {
	b      *Bridge
	svc    micro.Service
	census *nats.Subscription // the other replicas' census questions (census.go)
	// The bulk jobs this replica runs (bulk_run.go), and the adoption of orphaned ones.
	bulkCtx  context.Context
	bulkStop context.CancelFunc
	bulks    sync.WaitGroup
}

func (s *apiService) Start(context.Context) error {
	var err error
	if s.census, err = s.b.serveCensus(); err != nil {
		return fmt.Errorf("bridge: census: %w", err)
	}
	s.bulkCtx, s.bulkStop = context.WithCancel(context.Background())
	s.bulks.Add(1)
	go func() {
		defer s.bulks.Done()
		s.b.adoptBulks(s.bulkCtx)
	}()
	if s.svc, err = s.b.startAPI(s.b.workCtx); err != nil {
		return fmt.Errorf("bridge: task API: %w", err)
	}
	return nil
}

func (s *apiService) Stop(ctx context.Context) error {
	if s.svc != nil {
		_ = s.svc.Stop()
	}
	if s.census != nil {
		_ = s.census.Unsubscribe()
	}
	if s.bulkStop != nil {
		s.bulkStop()
	}
	if !waitCtx(ctx, &s.bulks) {
		return errors.New("bulk jobs still running")
	}
	return nil
}

// intakeService takes schedule messages from the intake consumer and stores them.
type intakeService struct {
	b    *Bridge
	cfg  intakeConfig
	adv  *nats.Subscription // the intake consumer's max-deliveries advisories
	stop context.CancelFunc // ends runIntakeFrom, which drains the intake consumer
	runs bool               // runIntakeFrom was started (intakeEnd will close)
}

// Start makes sure the intake stream and consumer exist and, once the server has every
// subscription of the services before it (an ack or request sent after Start returns is not
// lost), begins consuming.
func (s *intakeService) Start(ctx context.Context) error {
	b := s.b
	cons, err := b.ensureIntake(ctx)
	if err != nil {
		return err
	}
	if s.adv, err = b.watchMaxDeliveries(); err != nil {
		return fmt.Errorf("bridge: subscribe to intake advisories: %w", err)
	}
	fctx, fcancel := withDefaultTimeout(ctx)
	err = b.nc.FlushWithContext(fctx)
	fcancel()
	if err != nil {
		return fmt.Errorf("bridge: start: flush subscriptions: %w", err)
	}
	if err := ctx.Err(); err != nil { // a Stop came while the steps above ran
		return fmt.Errorf("bridge: start: %w", err)
	}
	intakeCtx, stop := context.WithCancel(context.Background())
	s.stop, s.runs = stop, true
	cc, err := b.consume(cons)
	if err != nil {
		b.log.Warn("intake: consume failed; retrying", "stream", s.cfg.Stream, "err", err)
		cons = nil
	}
	go b.runIntakeFrom(intakeCtx, cons, cc)
	return nil
}

// Stop stops taking schedule messages and waits for those taken to be stored.
func (s *intakeService) Stop(ctx context.Context) error {
	var errs []error
	if s.adv != nil {
		_ = s.adv.Unsubscribe()
	}
	if s.runs {
		s.stop()
		select {
		case <-s.b.intakeEnd:
		case <-ctx.Done():
			errs = append(errs, errors.New("intake consumer still draining"))
		}
	}
	s.b.closeIntake()
	if !waitCtx(ctx, &s.b.intake) {
		errs = append(errs, errors.New("schedule messages still being stored"))
	}
	return errors.Join(errs...)
}
