package kvstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Watch delivers the records of the given partitions (all if none are given), then
// EventInitDone, then live changes. One ordered consumer filters on PartitionFilter(p) for each p.
// A goroutine (drain) decodes what nats.go's watcher channel delivers and sends it on the
// watcher's Events channel, which holds at most Config.WatchBuffer events: when it is full that
// goroutine waits, nats.go's delivery waits for it, the consumer's flow control goes unanswered and
// the server stops sending, until the reader catches up. The channel is also closed if the connection closes. Starting the watch (the
// leader reads and the consumer's creation) is bounded by ctx's deadline, or Config.Timeout if
// it has none; the watch itself lasts until ctx ends or Stop.
func (s *JetStore) Watch(ctx context.Context, partitions ...int) (Watcher, error) {
	ps, err := checkPartitions(partitions, s.cfg.Partitions)
	if err != nil {
		return nil, err
	}
	var filters []string // a fresh slice: WatchFiltered rewrites its argument in place
	for _, p := range ps {
		filters = append(filters, PartitionFilter(p))
	}
	if len(ps) == s.cfg.Partitions {
		// Every partition: one filter for the whole bucket, which the server delivers from
		// faster than a list of one filter per partition.
		filters = []string{">"}
	}
	sctx, scancel := withTimeout(ctx, s.cfg.Timeout)
	defer scancel()
	// nats.go marks the end of the initial values when the consumer has delivered what was pending
	// at its creation on the server that hosts it. On a replicated bucket that server may be a
	// follower that has not yet applied the latest writes, so the watch also waits until it has
	// seen the revision the stream leader reports as last for its filters.
	target, err := s.watchTarget(sctx, filters, len(ps) == s.cfg.Partitions)
	if err != nil {
		return nil, fmt.Errorf("kvstore: watch %s: %w", s.cfg.Bucket, err)
	}
	if s.testHookTarget != nil {
		s.testHookTarget()
	}
	// nats.go unsubscribes when this context ends (and keeps a goroutine until it does), so it is
	// cancelled when the watcher stops. Until WatchFiltered returns it also ends with sctx, which
	// bounds the consumer's creation.
	wctx, cancel := context.WithCancel(ctx)
	stopBound := context.AfterFunc(sctx, cancel)
	kw, err := s.kv.WatchFiltered(wctx, filters)
	if !stopBound() && err == nil {
		go func() { // the watch was cancelled: let nats.go close its channel
			for range kw.Updates() {
			}
		}()
		err = sctx.Err()
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("kvstore: watch %s: %w", s.cfg.Bucket, mapError(err))
	}
	w := newJetWatcher(s.cfg.WatchBuffer)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		s.drain(wctx, kw, w, filters, len(ps) == s.cfg.Partitions, target)
	}()
	go func() {
		select {
		case <-w.stop:
		case <-wctx.Done():
		case <-drained: // nats.go closed the channel (the connection closed)
		}
		cancel()
		_ = kw.Stop() // fails harmlessly if the context already unsubscribed
		<-drained     // nats.go closes Updates once the subscription is gone
		close(w.done)
	}()
	return w, nil
}

// targetRecheck is how often a watch whose consumer has delivered its initial values, but not yet
// the revision the leader reported as last, asks the leader again.
const targetRecheck = 250 * time.Millisecond

// drain is the only reader of kw.Updates(): it turns nats.go's entries into events for w until
// nats.go closes the channel (after Stop, the end of ctx, or the connection's), and sends
// EventInitDone once nats.go has delivered the initial values and the watch has seen target, the
// leader's last revision at the start. That message may be gone by the time the consumer starts
// (a marker that expired, or a record that retired and whose marker then expired), so while only
// target is missing the leader is asked again every targetRecheck: once the watch has seen what
// the leader now has last, it has every record.
func (s *JetStore) drain(ctx context.Context, kw jetstream.KeyWatcher, w *jetWatcher, filters []string, all bool, target uint64) {
	initDone, natsInitDone, open := false, false, true
	var rd recordDecoder
	var seen uint64 // highest revision delivered
	var recheck *time.Ticker
	defer func() {
		if recheck != nil {
			recheck.Stop()
		}
		close(w.events)
	}()
	updates := kw.Updates()
	for {
		var tick <-chan time.Time
		if recheck != nil {
			tick = recheck.C
		}
		select {
		case e, ok := <-updates:
			if !ok {
				return
			}
			if !open {
				continue // stopped: keep reading until nats.go closes the channel
			}
			ev := jetEvent(&rd, e)
			seen = max(seen, ev.Revision)
			switch {
			case initDone:
				open = w.send(ctx, ev)
			case ev.Kind == EventInitDone:
				natsInitDone = true
			case ev.Kind != EventDelete:
				// A delete marker before the end of the initial values is a record deleted before
				// the watch: not a current record.
				open = w.send(ctx, ev)
			}
		case <-tick:
			tctx, cancel := withTimeout(ctx, s.cfg.Timeout)
			if t, err := s.watchTarget(tctx, filters, all); err == nil {
				target = t
			}
			cancel()
		}
		if !open || initDone || !natsInitDone {
			continue
		}
		if seen >= target {
			initDone = true
			open = w.send(ctx, Event{Kind: EventInitDone})
			if recheck != nil {
				recheck.Stop()
				recheck = nil
			}
		} else if recheck == nil {
			recheck = time.NewTicker(targetRecheck)
		}
	}
}

// watchTarget is the highest revision the stream leader has under the filters (all: they cover
// the bucket, so one read of ">" does).
func (s *JetStore) watchTarget(ctx context.Context, filters []string, all bool) (uint64, error) {
	if all {
		filters = []string{">"}
	}
	var target uint64
	for _, f := range filters {
		last, err := s.lastRevision(ctx, f)
		if err != nil {
			return 0, err
		}
		target = max(target, last)
	}
	return target, nil
}

// jetEvent turns a nats.go watch entry into an Event, decoded by rd; nil is the end of the
// initial values.
func jetEvent(rd *recordDecoder, e jetstream.KeyValueEntry) Event {
	if e == nil {
		return Event{Kind: EventInitDone}
	}
	rev := e.Revision()
	id, ok := IDFromKey(e.Key())
	if !ok {
		return Event{Kind: EventError, ID: e.Key(), Revision: rev,
			Err: fmt.Errorf("%w: key %q is not p<partition>.<task id>", ErrCorrupt, e.Key())}
	}
	op := e.Operation()
	if op == jetstream.KeyValueDelete || op == jetstream.KeyValuePurge {
		return Event{Kind: EventDelete, ID: id, Revision: rev}
	}
	ent, err := rd.entry(id, rev, e.Value())
	if err != nil {
		return Event{Kind: EventError, ID: id, Revision: rev, Err: err}
	}
	return Event{Kind: EventPut, ID: id, Revision: rev, Entry: ent}
}

// recordEvent is the MemStore's Event for the message of task id at rev (jetEvent's likewise): a
// delete marker, or a value that decodes or not.
func recordEvent(id string, rev uint64, deleted bool, val []byte) Event {
	if deleted {
		return Event{Kind: EventDelete, ID: id, Revision: rev}
	}
	ent, err := decodeEntry(id, rev, val)
	if err != nil {
		return Event{Kind: EventError, ID: id, Revision: rev, Err: err}
	}
	return Event{Kind: EventPut, ID: id, Revision: rev, Entry: ent}
}

// checkPartitions validates and sorts the partitions of a watch; none means all n.
func checkPartitions(ps []int, n int) ([]int, error) {
	if len(ps) == 0 {
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		return all, nil
	}
	ps = slices.Clone(ps)
	slices.Sort(ps)
	ps = slices.Compact(ps)
	if ps[0] < 0 || ps[len(ps)-1] >= n {
		return nil, fmt.Errorf("kvstore: watch partitions %v: out of range 0..%d", ps, n-1)
	}
	return ps, nil
}

// jetWatcher is the JetStore's Watcher. Its only producer, drain, sends each event on events, a
// channel of Config.WatchBuffer that the reader takes from directly: one hand-over per event.
type jetWatcher struct {
	events   chan Event    // written and closed by drain; read by the user
	stop     chan struct{} // closed by Stop
	stopOnce sync.Once
	done     chan struct{} // closed by the store once drain is gone
	high     atomic.Int64  // most events events has held (for tests); written by drain
}

func newJetWatcher(buffer int) *jetWatcher {
	return &jetWatcher{
		events: make(chan Event, buffer),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
}

func (w *jetWatcher) Events() <-chan Event { return w.events }

// Stop ends the watch, waits until its goroutines are gone and closes Events. Idempotent.
func (w *jetWatcher) Stop() error {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
	return nil
}

// send hands ev to the reader, waiting while events is full; false if the watch stopped or ctx
// ended first (ev is then dropped).
func (w *jetWatcher) send(ctx context.Context, ev Event) bool {
	select {
	case w.events <- ev:
	default:
		select {
		case w.events <- ev:
		case <-w.stop:
			return false
		case <-ctx.Done():
			return false
		}
	}
	if n := int64(len(w.events)); n > w.high.Load() {
		w.high.Store(n)
	}
	return true
}

// highWater is the most events the channel has held.
func (w *jetWatcher) highWater() int { return int(w.high.Load()) }

// watcher is the MemStore's Watcher. Its producer queues events with push (never waits: it runs
// under the store's lock); pump, its only goroutine, moves them to events.
type watcher struct {
	mu    sync.Mutex
	queue []Event // written by push, head removed by pump
	high  int     // most events the queue has held (for tests)

	wake     chan struct{} // capacity 1; push signals pump
	events   chan Event    // written and closed by pump; read by the user
	stop     chan struct{} // closed by Stop
	stopOnce sync.Once
	done     chan struct{} // closed by the store once pump and the producer are gone
}

func newWatcher() *watcher {
	return &watcher{
		wake:   make(chan struct{}, 1),
		events: make(chan Event),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
}

func (w *watcher) Events() <-chan Event { return w.events }

// Stop ends the watch, waits until its goroutines are gone and closes Events. Idempotent.
func (w *watcher) Stop() error {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
	return nil
}

// push queues evs whatever the queue holds.
func (w *watcher) push(evs ...Event) {
	w.mu.Lock()
	w.queue = append(w.queue, evs...)
	w.high = max(w.high, len(w.queue))
	w.mu.Unlock()
	signal(w.wake)
}

// highWater is the most events the queue has held.
func (w *watcher) highWater() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.high
}

// signal leaves a token in a channel of capacity 1 unless one is there.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// pump delivers queued events until Stop or the end of ctx; then it closes events. Undelivered
// events are dropped.
func (w *watcher) pump(ctx context.Context) {
	defer close(w.events)
	for {
		w.mu.Lock()
		var next Event
		var out chan<- Event
		if len(w.queue) > 0 {
			next, out = w.queue[0], w.events
		}
		w.mu.Unlock()
		select {
		case out <- next:
			w.mu.Lock()
			w.queue[0] = Event{}
			w.queue = w.queue[1:]
			w.mu.Unlock()
		case <-w.wake:
		case <-w.stop:
			return
		case <-ctx.Done():
			return
		}
	}
}

// lastRevision is the revision of the last message under the key filter (0 if there is none),
// as the stream leader knows it.
func (s *JetStore) lastRevision(ctx context.Context, filter string) (uint64, error) {
	m, err := s.leaderLast(ctx, filter)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	return m.seq, err
}
