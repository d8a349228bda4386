package membership

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/internal/retry"
	"github.com/axbridge/axbridge/kvstore"
)

// ErrNotLeft reports that Stop could not delete this replica's key: it expires a lease after the
// last heartbeat instead.
var ErrNotLeft = errors.New("membership: leave not confirmed")

// ErrReplicaInUse reports that another process writes this replica's heartbeat key: two
// processes were given one replica id.
var ErrReplicaInUse = errors.New("in use by another process")

var errWatchEnded = errors.New("membership: the members watch ended")

// Member is this replica's membership: its heartbeats, the member view, its share of the
// partitions, its fence and the housekeeper election. One goroutine (run) owns all of its state;
// store calls run as bounded async calls whose results come back to it on channels (calls.go).
type Member struct {
	cfg   Config
	nonce string // this process's, in its heartbeats (beat)

	mu      sync.Mutex // guards started, stopped and inUse
	started bool
	stopped bool
	inUse   error              // another process writes this replica's key (ErrReplicaInUse)
	cancel  context.CancelFunc // ends run and the calls in flight
	done    chan struct{}      // closed when run has returned; nil unless it was started

	// Owned by run (and by Start before run starts).
	ctx        context.Context
	view       view
	fs         fenceState
	fence      time.Time // this replica owns its partitions until then
	seq        uint64    // the last heartbeat's number
	renewAfter uint64    // only heartbeats numbered above it renew the fence
	pending    int       // heartbeats in flight
	told       bool      // fenced, it told the others so: its heartbeats say so until it owns again
	failing    bool      // heartbeats are failing (logged once)
	downSince  time.Time // when the connection was first seen down; zero while up
	house      housekeeper
	calls      sync.WaitGroup // async store calls in flight

	// Async results: written by the calls, read by run. Each has room for every call in flight.
	beats   chan beatResult
	leaves  chan error
	watched chan watchResult
	houses  chan houseResult
}

// New checks cfg and returns a member that has not joined yet.
func New(cfg Config) (*Member, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Member{
		cfg:     cfg,
		nonce:   newNonce(),
		beats:   make(chan beatResult, 16),
		leaves:  make(chan error, 1),
		watched: make(chan watchResult, 1),
		houses:  make(chan houseResult, 1),
	}, nil
}

// Start joins: it loads the member view, gives Acks the partitions this replica will own, calls
// Flush, heartbeats and publishes the first snapshot; then run keeps all of it up until Stop.
// Every call is bounded by ctx, or by 10s when ctx has no deadline. A member starts once. It
// fails with ErrReplicaInUse, wrapped, if another process heartbeats this replica's key.
func (m *Member) Start(outer context.Context) (err error) {
	m.mu.Lock()
	if m.started || m.stopped {
		m.mu.Unlock()
		return errors.New("membership: started or stopped already")
	}
	m.started = true
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.mu.Unlock()
	defer func() {
		if err != nil {
			m.cancel()
		}
	}()
	ctx, cancel := withDefaultTimeout(outer)
	defer cancel()
	events, err := m.cfg.Store.WatchMembers(m.ctx)
	if err != nil {
		return err
	}
	m.view = newView(m.cfg, m.nonce)
	if err := m.load(ctx, events); err != nil {
		return err
	}
	m.cfg.Acks(m.view.prepare(m.cfg.Clock.Now()))
	if err := m.cfg.Flush(ctx); err != nil {
		return fmt.Errorf("subscribe to acks: %w", err)
	}
	sent := m.cfg.Clock.Now()
	m.seq = 1
	hctx, hcancel := withDefaultTimeout(outer)
	err = m.cfg.Store.Heartbeat(hctx, m.cfg.ReplicaID, beat{m.nonce, m.seq, false}.value(), m.cfg.Lease)
	hcancel()
	if err != nil {
		return err
	}
	m.fence, m.fs = sent.Add(m.cfg.Lease-m.cfg.margin()), initial
	var status chan nats.Status
	if m.cfg.Conn != nil {
		status = m.cfg.Conn.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED, nats.CONNECTED)
	}
	m.publish()
	m.mu.Lock()
	m.done = make(chan struct{})
	m.mu.Unlock()
	go func() {
		defer close(m.done)
		m.run(events, status)
	}()
	return nil
}

// load applies the watch's initial load. If that holds this replica's key as another process
// wrote it, load goes on until the key is gone or the key has gone staleAfter without another
// write (counted from its write by the store's time as read by this clock, and at most half a
// lease from now): a live process heartbeats every quarter lease, so that is a process of this
// id that ended without a leave (a restart after a crash), and a write meanwhile is a live one,
// and load fails. A restart so waits a moment, not until the old key expires. (A clock ahead of
// the store's shortens the wait; a second live process is then caught by its next write.)
func (m *Member) load(ctx context.Context, events <-chan kvstore.MemberEvent) error {
	var old <-chan time.Time // while the other process's key is there
	for m.view.loading != nil || old != nil {
		select {
		case ev, ok := <-events:
			if !ok {
				return errWatchEnded
			}
			loading := m.view.loading != nil
			switch foreign := m.view.event(ev, m.cfg.Clock.Now()); {
			case foreign && !loading:
				return m.ousted()
			case foreign:
				wait := m.cfg.Lease / 2
				if age := m.cfg.Clock.Now().Sub(ev.At); age > 0 {
					wait = min(wait, max(m.staleAfter()-age, 0))
				}
				m.cfg.Logger.Warn("this replica's key was written by another process: waiting for another heartbeat of it",
					"replica", m.cfg.ReplicaID, "wait", wait)
				t := m.cfg.Clock.NewTimer(wait)
				defer t.Stop()
				old = t.C()
			case ev.Deleted && ev.ID == m.cfg.ReplicaID:
				old = nil
			}
		case <-old:
			old = nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// staleAfter is how long after its last write a live member's key is written again at the latest
// (a quarter lease, and a tenth for a late heartbeat).
func (m *Member) staleAfter() time.Duration { return m.cfg.Lease/4 + m.cfg.Lease/10 }

// Err returns ErrReplicaInUse, wrapped, once another process has written this replica's key;
// this replica then owns nothing until it stops.
func (m *Member) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inUse
}

// ousted records that another process writes this replica's key and returns the error.
func (m *Member) ousted() error {
	err := fmt.Errorf("membership: replica id %s is %w", m.cfg.ReplicaID, ErrReplicaInUse)
	m.mu.Lock()
	m.inUse = err
	m.mu.Unlock()
	m.cfg.Logger.Error("another process heartbeats this replica's key: this one claims, fires and heartbeats nothing; give each process an id of its own",
		"replica", m.cfg.ReplicaID)
	return err
}

// Stop ends the goroutine and the calls in flight, resigns the housekeeper post and deletes this
// replica's key, bounded by ctx (the delete by a second at most). It returns ErrNotLeft, wrapped,
// when the delete failed, and ErrReplicaInUse, wrapped, without a delete, if another process
// writes the key. Stop is idempotent; a member whose Start failed still leaves.
func (m *Member) Stop(ctx context.Context) error {
	m.mu.Lock()
	if m.stopped || !m.started {
		m.stopped = true
		m.mu.Unlock()
		return nil
	}
	m.stopped = true
	done := m.done
	m.mu.Unlock()
	m.cancel()
	var errs []error
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("membership still running: %w", ctx.Err()))
		}
	}
	m.mu.Lock()
	inUse := m.inUse
	m.mu.Unlock()
	if inUse != nil { // the key is the other process's
		return errors.Join(append(errs, inUse)...)
	}
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	err := m.cfg.Store.Leave(lctx, m.cfg.ReplicaID)
	cancel()
	if err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrNotLeft, err))
	}
	return errors.Join(errs...)
}

// run is the member's goroutine: one select over its timers, the watch, the connection's state
// and the results of its calls.
func (m *Member) run(events <-chan kvstore.MemberEvent, status chan nats.Status) {
	c, lease := m.cfg.Clock, m.cfg.Lease
	beat := c.NewTimer(lease / 4)      // the next heartbeat tick
	nextBeat := c.Now().Add(lease / 4) // when it is due
	downTimer := stopped(c)            // a downGrace after the connection went down
	viewTimer := c.NewTimer(time.Hour) // the view's next expiry
	rewatch := stopped(c)              // the next attempt to start the members watch
	houseTimer := c.NewTimer(0)        // the next housekeeper write
	defer m.exit(status, beat, downTimer, viewTimer, rewatch, houseTimer)
	m.arm(viewTimer)
	failed := 0 // starts of the members watch failed in a row
	for {
		isTick, conn := false, false
		select {
		case <-m.ctx.Done():
			return
		case <-beat.C():
			isTick, conn = true, true
			for now := c.Now(); !nextBeat.After(now); { // a late tick drops those it missed, as a ticker does
				nextBeat = nextBeat.Add(lease / 4)
			}
			beat.Reset(nextBeat.Sub(c.Now()))
		case st := <-status:
			conn = true
			if st == nats.CONNECTED {
				// Even if it is down again already: a new outage counts from now.
				m.downSince = time.Time{}
				downTimer.Stop()
			}
		case <-downTimer.C():
			conn = true
		case ev, ok := <-events:
			if !ok {
				if m.ctx.Err() != nil {
					return
				}
				events = nil
				m.cfg.Logger.Warn("members watch ended; starting it again")
				failed = 0
				m.watch()
				break
			}
			if m.view.event(ev, c.Now()) {
				m.step(duplicate)
			}
		case r := <-m.watched:
			if r.err != nil {
				m.cfg.Logger.Debug("start members watch; trying again", "err", r.err)
				failed++
				rewatch.Reset(retry.Rewatch.Wait(failed))
				break
			}
			events, m.view.loading = r.events, map[string]peer{}
		case <-rewatch.C():
			m.watch()
		case r := <-m.beats:
			m.beaten(r)
		case err := <-m.leaves:
			m.leaveEnded(err)
		case <-houseTimer.C():
			m.campaign()
		case r := <-m.houses:
			houseTimer.Reset(m.elected(r))
		case <-viewTimer.C():
		}
		m.clock(c.Now())
		if conn {
			m.connTurn(isTick, downTimer)
		}
		m.publish()
		m.arm(viewTimer)
	}
}

// arm sets t to the view's next deadline.
func (m *Member) arm(t Timer) {
	t.Reset(max(m.view.next.Sub(m.cfg.Clock.Now()), time.Millisecond))
}

// exit ends what run began: the timers, the calls in flight, the housekeeper post.
func (m *Member) exit(status chan nats.Status, timers ...Timer) {
	for _, t := range timers {
		t.Stop()
	}
	if status != nil {
		m.cfg.Conn.RemoveStatusListener(status)
	}
	m.calls.Wait()
	select {
	case r := <-m.houses:
		m.elected(r)
	default:
	}
	m.resign()
}

// step moves the fence machine by e and acts on the transition (see next).
func (m *Member) step(e event) {
	from := m.fs
	m.fs = next(from, e)
	switch to := m.fs.phase; {
	case to == ousted && from.phase != ousted:
		now := m.cfg.Clock.Now()
		m.fence, m.house.until = minTime(m.fence, now), minTime(m.house.until, now)
		m.setHouse(false)
		_ = m.ousted()
	case to == leaving && from.phase != leaving:
		m.leave()
	case to == joining && from.phase != joining:
		m.cfg.Logger.Info("joining the replicas again", "replica", m.cfg.ReplicaID)
		m.heartbeat(true, true)
	case e == tick && to == owning:
		m.heartbeat(false, false)
	case e == tick && to == fenced:
		m.heartbeat(false, m.told || m.pending > 0)
	case from.phase == owning && to == fenced && m.pending > 0:
		// Its heartbeats are slow to be confirmed, not failing: they may well land, and the
		// others count it alive, so it tells them to take its share.
		m.heartbeat(false, true)
	}
}

// clock gives the fence machine the events of the time that passed.
func (m *Member) clock(now time.Time) {
	if !now.Before(m.fence) {
		m.step(expired)
	}
	if now.Sub(m.fence) >= m.cfg.Lease/2 {
		m.step(fencedLong)
	}
}

func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, 10*time.Second)
}

// publish brings the view up to date and hands its outputs to the callbacks.
func (m *Member) publish() {
	now := m.cfg.Clock.Now()
	self := now.Before(m.fence)
	o, changed, acksMoved := m.view.update(now, self, m.fence)
	if acksMoved {
		m.cfg.Acks(slices.Clone(m.view.acks))
	}
	m.cfg.Own(o, changed)
	if self {
		m.cfg.Metrics.Owned.Set(float64(o.N))
	} else {
		m.cfg.Metrics.Owned.Set(0)
	}
	if gone := m.view.sweep(now); gone != nil {
		m.cfg.Sweep(gone)
	}
}
