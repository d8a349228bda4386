package kvstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// Watch delivers the records of the given partitions (all if none are given), then
// EventInitDone, then live changes. When the bucket's messages are large (headersOnly), the
// initial values come from a headers-only ordered consumer (loadHeads): each record's state is its
// header HdrRecord, decoded into a Partial entry, so that a restart does not move every payload
// over the wire; a record without the header (written before it existed) is read in full. A
// watch of a large share of the partitions, but not all, loads from one consumer of the whole
// bucket (wholeBucketLoad), with whole records unless headersOnly, and drops the other keys.
// Otherwise the whole watch is nats.go's, with whole records (drainFull). Once the initial values
// of the first consumer are done, that consumer is stopped and a normal
// watch (nats.go's, one ordered consumer filtering on PartitionFilter(p) for each p) takes over
// from the next revision, so the live changes are full entries and nothing between the two is
// lost or delivered twice. A goroutine (drain) turns what both deliver into events on the
// watcher's Events channel, which holds at most Config.WatchBuffer events: when it is full that
// goroutine waits, the consumer's delivery waits for it, its flow control goes unanswered and the
// server stops sending, until the reader catches up. The channel is also closed if the connection
// closes, or if the live watch cannot be started (the reader then starts the watch again).
// Starting the watch (the leader reads and the first consumer's creation) is bounded by ctx's
// deadline, or Config.Timeout if it has none; the watch itself lasts until ctx ends or Stop.
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
	// The consumer marks the end of the initial values when it has delivered what was pending at
	// its creation on the server that hosts it. On a replicated bucket that server may be a
	// follower that has not yet applied the latest writes, so the watch also waits until it has
	// seen the revision the stream leader reports as last for its filters.
	target, err := s.watchTarget(sctx, filters, len(ps) == s.cfg.Partitions)
	if err != nil {
		return nil, fmt.Errorf("kvstore: watch %s: %w", s.cfg.Bucket, err)
	}
	if s.testHookTarget != nil {
		s.testHookTarget()
	}
	// The consumers end with this context, which is cancelled when the watcher stops. Until the
	// first is created it also ends with sctx, which bounds the creation.
	wctx, cancel := context.WithCancel(ctx)
	stopBound := context.AfterFunc(sctx, cancel)
	hw, kw, err := s.loadConsumer(sctx, wctx, ps, filters)
	if !stopBound() && err == nil {
		if hw != nil {
			hw.stop()
		} else {
			go func() { // the watch was cancelled: let nats.go close its channel
				for range kw.Updates() {
				}
			}()
		}
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
		if hw != nil {
			s.drain(wctx, hw, w, filters, len(ps) == s.cfg.Partitions, target)
		} else {
			s.drainFull(wctx, kw, w, filters, len(ps) == s.cfg.Partitions, target)
		}
	}()
	go func() {
		select {
		case <-w.stop:
		case <-wctx.Done():
		case <-drained: // the connection closed, or the live watch could not start
		}
		cancel() // nats.go unsubscribes a watch when its context ends
		if hw != nil {
			hw.stop() // idempotent; drain stops it when the initial values are done
		} else {
			_ = kw.Stop() // fails harmlessly if the context already unsubscribed
		}
		<-drained // nats.go closes Updates once the subscription is gone
		close(w.done)
	}()
	return w, nil
}

// loadConsumer creates the consumer of a watch's initial values: a headWatch (of the whole bucket
// for a large share of the partitions, wholeBucketLoad; headers-only if the bucket's messages are
// large, headersOnly), or else nats.go's watch under the filters, which goes on as the live one.
func (s *JetStore) loadConsumer(sctx, wctx context.Context, ps []int, filters []string) (*headWatch, jetstream.KeyWatcher, error) {
	heads := s.headersOnly(sctx)
	if keep := wholeBucketLoad(ps, s.cfg.Partitions); keep != nil {
		hw, err := s.watchHeads(wctx, []string{">"}, !heads, keep)
		return hw, nil, err
	}
	if heads {
		hw, err := s.watchHeads(wctx, filters, false, nil)
		return hw, nil, err
	}
	kw, err := s.kv.WatchFiltered(wctx, slices.Clone(filters))
	return nil, kw, err
}

// headersOnlyMin is the mean size of the bucket's stored messages (header and value) from which a
// watch loads its initial values headers-only. Below it the header, which the client parses into a
// map, costs more than the payloads it saves: measured with `axbridge bench --only pending
// --pending 250000` (one node, sync default, 2 cores), the index loaded in 1.2-2.0 s (median 1.4)
// from whole records and 1.7-3.2 s (median 1.7) headers-only at 37-byte payloads (stored messages
// of about 600 bytes), but in 2.9-4.5 s whole and 1.5-2.1 s headers-only at 4 KiB payloads.
const headersOnlyMin = 2048

// headersOnly reports whether a watch starting now loads headers-only: whether the bucket's
// messages are large enough on average (headersOnlyMin), by one stream info request. If that
// fails the watch loads whole records, which is always correct.
func (s *JetStore) headersOnly(ctx context.Context) bool {
	if s.testLoad != 0 {
		return s.testLoad > 0
	}
	st, err := s.kv.Status(ctx)
	if err != nil || st.Values() == 0 {
		return false
	}
	return st.Bytes()/st.Values() >= headersOnlyMin
}

// wholeBucketShare: a watch of at least 1/wholeBucketShare of the partitions, but not all, loads
// its initial values from one consumer of the whole bucket and drops the other partitions' keys.
// nats-server delivers the last message of each subject far more slowly under a list of filters
// than under one, once keys have older revisions: on a 3-node cluster (sync always), of records
// written twice, 2,969 of 20 partitions in 480 ms, 1,366 of 10 in 100 ms, 694 of 5 in 34 ms, but
// all 9,000 in 50 ms (BenchmarkWatchLoadCluster). A restart in a soak read its share of the bucket
// in up to 2.9 s so.
const wholeBucketShare = 8

// wholeBucketLoad returns, for a watch of partitions ps of n that loads from the whole bucket
// (wholeBucketShare), whether a key is one of its own, as the filters would match it; nil if the
// watch loads under its filters.
func wholeBucketLoad(ps []int, n int) func(key string) bool {
	if len(ps) == n || len(ps)*wholeBucketShare < n {
		return nil
	}
	in := make([]bool, n)
	for _, p := range ps {
		in[p] = true
	}
	return func(key string) bool {
		rest, ok := strings.CutPrefix(key, "p")
		num, id, dot := strings.Cut(rest, ".")
		p, err := strconv.Atoi(num)
		return ok && dot && id != "" && err == nil && p >= 0 && p < n && in[p] && strconv.Itoa(p) == num
	}
}

// headWatch is the ordered consumer of a watch's initial values, headers-only unless whole (a
// load from the whole bucket of small records: wholeBucketLoad). Its callback, on
// nats.go's delivery goroutine, hands each message to drain through msgs, waiting while drain is
// behind (so flow control holds the server back, as for nats.go's own watcher).
type headWatch struct {
	whole    bool                  // the messages carry their values, not headers only
	keep     func(key string) bool // if set, the keys of the watch; the consumer has them all
	sub      *nats.Subscription
	pending  uint64         // messages pending at the consumer's creation
	msgs     chan *nats.Msg // written by the callback, read by drain
	quit     chan struct{}  // closed by stop: the callback drops what it has
	closed   chan struct{}  // closed when the subscription is gone (stop, or the connection)
	stopOnce sync.Once
}

// watchHeads creates the consumer (headers-only unless whole) of the last message of every key
// under filters (keys relative to the bucket), and then of every later message, as nats.go's KV
// watch does; keep, if set, picks the watch's keys from those.
func (s *JetStore) watchHeads(ctx context.Context, filters []string, whole bool, keep func(string) bool) (*headWatch, error) {
	js, err := s.js.Conn().JetStream(nats.APIPrefix(apiPrefix(s.js.Options())))
	if err != nil {
		return nil, err
	}
	subjects := make([]string, len(filters))
	for i, f := range filters {
		subjects[i] = s.prefix + f
	}
	hw := &headWatch{whole: whole, keep: keep, msgs: make(chan *nats.Msg, 256), quit: make(chan struct{}), closed: make(chan struct{})}
	cb := func(m *nats.Msg) {
		select {
		case hw.msgs <- m:
		case <-hw.quit:
		}
	}
	opts := []nats.SubOpt{nats.BindStream("KV_" + s.cfg.Bucket), nats.OrderedConsumer(),
		nats.DeliverLastPerSubject(), nats.Context(ctx)}
	if !whole {
		opts = append(opts, nats.HeadersOnly())
	}
	subj := subjects[0]
	if len(subjects) > 1 {
		subj = ""
		opts = append(opts, nats.ConsumerFilterSubjects(subjects...))
	}
	sub, err := js.Subscribe(subj, cb, opts...)
	if err != nil {
		return nil, err
	}
	sub.SetClosedHandler(func(string) { close(hw.closed) })
	hw.sub = sub
	if hw.pending, err = sub.InitialConsumerPending(); err != nil {
		hw.stop()
		return nil, err
	}
	return hw, nil
}

// stop unsubscribes (its consumer is ephemeral: the server removes it) and releases the callback.
// Idempotent.
func (hw *headWatch) stop() {
	hw.stopOnce.Do(func() {
		close(hw.quit)
		_ = hw.sub.Unsubscribe() // fails harmlessly if the connection closed it already
	})
}

// targetRecheck is how often a watch whose consumer has delivered its initial values, but not yet
// the revision the leader reported as last, asks the leader again.
const targetRecheck = 250 * time.Millisecond

// drain is the only reader of both consumers: it delivers the initial values (loadHeads), then
// stops the headers-only consumer and delivers what a normal watch from the next revision brings,
// until nats.go closes its channel (after Stop, the end of ctx, or the connection's).
func (s *JetStore) drain(ctx context.Context, hw *headWatch, w *jetWatcher, filters []string, all bool, target uint64) {
	defer close(w.events)
	seen, ok := s.loadHeads(ctx, hw, w, filters, all, target)
	hw.stop()
	if !ok {
		return
	}
	kw, err := s.kv.WatchFiltered(ctx, slices.Clone(filters), jetstream.ResumeFromRevision(seen+1))
	if err != nil {
		return // closing Events ends the watch: the reader starts it again
	}
	var rd recordDecoder
	open := true
	updates := kw.Updates()
	for {
		select {
		case e, ok := <-updates:
			if !ok {
				return
			}
			if !open || e == nil {
				// Stopped (keep reading until nats.go closes the channel), or the live watch's own
				// end of initial values: the first watch has delivered those.
				continue
			}
			open = w.send(ctx, jetEvent(&rd, e))
		case <-ctx.Done():
			// nats.go closes Updates from the subscription's close handler, which it sets only
			// after subscribing: a cancel or a closed connection in between would leave the
			// channel open for good. Unsubscribe, then take what is still on its way until the
			// channel closes or stays quiet (after Unsubscribe nothing new is sent).
			_ = kw.Stop()
			quiet := time.NewTimer(time.Second)
			defer quiet.Stop()
			for {
				select {
				case _, ok := <-updates:
					if !ok {
						return
					}
				case <-quiet.C:
					return
				}
			}
		}
	}
}

// loadHeads delivers the initial values from hw, then EventInitDone, once the consumer has
// delivered what was pending at its creation and the watch has seen target, the leader's last
// revision at the start. That message may be gone by the time the consumer starts (a marker that
// expired, or a record that retired and whose marker then expired), so while only target is
// missing the leader is asked again every targetRecheck: once the watch has seen what the leader
// now has last, it has every record. It returns the highest revision delivered, and false if the
// watch ended first.
func (s *JetStore) loadHeads(ctx context.Context, hw *headWatch, w *jetWatcher, filters []string, all bool, target uint64) (uint64, bool) {
	start := target // the leader's last revision when the watch started; rechecks raise target
	var rd recordDecoder
	var seen, received uint64
	natsInitDone := hw.pending == 0
	// full holds the records without a HdrRecord header, key → revision, until they are read in
	// full in a batch. A later message of the key drops its entry: that one is delivered instead.
	full := map[string]uint64{}
	var recheck *time.Ticker
	defer func() {
		if recheck != nil {
			recheck.Stop()
		}
	}()
	for {
		if natsInitDone {
			if seen >= target {
				if !s.sendFull(ctx, w, &rd, full) {
					return seen, false
				}
				return seen, w.send(ctx, Event{Kind: EventInitDone})
			}
			if recheck == nil {
				recheck = time.NewTicker(targetRecheck)
			}
		}
		var tick <-chan time.Time
		if recheck != nil {
			tick = recheck.C
		}
		select {
		case m := <-hw.msgs:
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			rev := md.Sequence.Stream
			seen = max(seen, rev)
			if received++; received >= hw.pending || md.NumPending == 0 {
				natsInitDone = true
			}
			key := strings.TrimPrefix(m.Subject, s.prefix)
			if hw.keep != nil && !hw.keep(key) {
				continue
			}
			delete(full, key)
			ev, whole := hw.event(&rd, key, rev, m)
			switch {
			case whole:
				full[key] = rev
				if len(full) >= maxGetMany && !s.sendFull(ctx, w, &rd, full) {
					return seen, false
				}
			case initialKeeps(ev, start):
				if !w.send(ctx, ev) {
					return seen, false
				}
			}
		case <-tick:
			target = s.recheckTarget(ctx, filters, all, target)
		case <-hw.closed:
			return seen, false // the connection closed
		case <-ctx.Done():
			return seen, false
		}
	}
}

// event is the event of message m of key at rev (whole: a record to be read in full): the record
// it carries if the consumer is not headers-only, else headEvent's.
func (hw *headWatch) event(rd *recordDecoder, key string, rev uint64, m *nats.Msg) (Event, bool) {
	if _, ok := IDFromKey(key); ok && hw.whole && !isMarker(m.Header) {
		return fullEvent(rd, key, rev, m.Data), false
	}
	return headEvent(rd, key, rev, m.Header)
}

// headEvent is the event of a headers-only message of key at rev: a delete, a Partial entry
// decoded from HdrRecord, or (whole) a record without that header, to be read in full.
func headEvent(rd *recordDecoder, key string, rev uint64, h nats.Header) (ev Event, whole bool) {
	id, ok := IDFromKey(key)
	if !ok {
		return Event{Kind: EventError, ID: key, Revision: rev,
			Err: fmt.Errorf("%w: key %q is not p<partition>.<task id>", ErrCorrupt, key)}, false
	}
	if isMarker(h) {
		return Event{Kind: EventDelete, ID: id, Revision: rev}, false
	}
	v := h.Get(HdrRecord)
	if v == "" {
		return Event{}, true
	}
	// The decoder only reads its input (the strings it returns alias it), so the header's string
	// is read in place rather than copied: one allocation less per record of the load.
	ent, err := rd.partial(id, rev, unsafe.Slice(unsafe.StringData(v), len(v)))
	if err != nil {
		return Event{}, true // the body may still read: read the record in full
	}
	return Event{Kind: EventPut, ID: id, Revision: rev, Entry: ent}, false
}

// sendFull reads the records in full (key → the revision the watch saw) and delivers each that is
// still at that revision, then empties full. A batched direct get answers most; one that answers
// an older revision, or none, may be a replica that lags, so the stream leader is asked for that
// exact revision. A record replaced meanwhile is left out: this watch delivers its newer
// message. False if the watch ended, or a read failed (the watch then ends: the reader starts it
// again).
func (s *JetStore) sendFull(ctx context.Context, w *jetWatcher, rd *recordDecoder, full map[string]uint64) bool {
	if len(full) == 0 {
		return true
	}
	defer clear(full)
	rctx, cancel := withTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	subjects := make([]string, 0, len(full))
	var upTo uint64
	for key, rev := range full {
		subjects = append(subjects, s.prefix+key)
		upTo = max(upTo, rev)
	}
	var evs []Event
	msgs, err := jetstreamext.GetLastMsgsFor(rctx, s.js, "KV_"+s.cfg.Bucket, subjects, jetstreamext.GetLastMsgsUpToSeq(upTo))
	if err == nil {
		for m, err := range msgs {
			if err != nil {
				break // whatever is left is asked of the leader below
			}
			key := strings.TrimPrefix(m.Subject, s.prefix)
			rev, ok := full[key]
			switch {
			case !ok, m.Sequence < rev:
				continue
			case m.Sequence == rev && !isMarker(m.Header):
				evs = append(evs, fullEvent(rd, key, rev, m.Data))
			}
			delete(full, key) // read, or replaced by a later message of this watch
		}
	}
	for key, rev := range full {
		m, err := s.leaderGet(rctx, struct {
			Seq uint64 `json:"seq"`
		}{rev})
		switch {
		case errors.Is(err, ErrNotFound):
			continue // replaced (and this watch delivers what replaced it) or gone
		case err != nil:
			return false
		case !m.deleted && m.subject == s.prefix+key:
			evs = append(evs, fullEvent(rd, key, rev, m.data))
		}
	}
	for _, ev := range evs {
		if !w.send(ctx, ev) {
			return false
		}
	}
	return true
}

// fullEvent is the event of the whole record val of key at rev.
func fullEvent(rd *recordDecoder, key string, rev uint64, val []byte) Event {
	id, _ := IDFromKey(key) // headEvent checked it
	ent, err := rd.entry(id, rev, val)
	if err != nil {
		return Event{Kind: EventError, ID: id, Revision: rev, Err: err}
	}
	return Event{Kind: EventPut, ID: id, Revision: rev, Entry: ent}
}

// drainFull is the only reader of kw.Updates() of a watch that loads whole records: it turns nats.go's entries into events for w until
// nats.go closes the channel (after Stop, the end of ctx, or the connection's), and sends
// EventInitDone once nats.go has delivered the initial values and the watch has seen target, the
// leader's last revision at the start. That message may be gone by the time the consumer starts
// (a marker that expired, or a record that retired and whose marker then expired), so while only
// target is missing the leader is asked again every targetRecheck: once the watch has seen what
// the leader now has last, it has every record.
func (s *JetStore) drainFull(ctx context.Context, kw jetstream.KeyWatcher, w *jetWatcher, filters []string, all bool, target uint64) {
	start := target // the leader's last revision when the watch started; rechecks raise target
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
			case initialKeeps(ev, start):
				open = w.send(ctx, ev)
			}
		case <-tick:
			target = s.recheckTarget(ctx, filters, all, target)
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

// initialKeeps reports whether ev, delivered before the end of a watch's initial values, goes to
// the reader. A delete marker at or below start (the leader's last revision when the watch
// started) is a record deleted before the watch: not a current record. One above it is a live
// delete that came before the end of the initial values: the reader may hold the record.
func initialKeeps(ev Event, start uint64) bool {
	return ev.Kind != EventDelete || ev.Revision > start
}

// recheckTarget asks the leader again for the watch's target (watchTarget), keeping target if
// that fails.
func (s *JetStore) recheckTarget(ctx context.Context, filters []string, all bool, target uint64) uint64 {
	tctx, cancel := withTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	if t, err := s.watchTarget(tctx, filters, all); err == nil {
		return t
	}
	return target
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
