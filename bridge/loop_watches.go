package bridge

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/axbridge/axbridge/kvstore"
)

// loopWatch is the loop's task watch: a watch set of the partitions owned (loop_watchset.go),
// and the re-watches on their way. A watch that ends is started again on another goroutine while
// the loop keeps firing from its index. When the partitions this replica owns change, the core
// drops what it indexed of those lost, and a watch of just the partitions gained starts the same
// way and joins the running one: the gain's tasks fire as soon as its own load is done, and what
// the replica kept is not loaded again. A change with nothing gained, or one that would make the
// set too large, replaces the watch by one of the new set (the old one runs until that is up).
// It is owned by the loop goroutine.
type loopWatch struct {
	ctx     context.Context
	b       *Bridge
	l       *loopState
	w       *watchSet            // nil while no watch runs
	events  <-chan kvstore.Event // w's events, nil without w
	watches chan watchMsg        // re-watch goroutine → loop: a new running watch
	pending context.CancelFunc   // ends the re-watch on its way, if any
	gen     uint64               // numbers the re-watches
	helpers sync.WaitGroup       // re-watches and the reconciler
	down    time.Time            // when the watch ended
	init    bool                 // the first load is done (b.ready is closed)
	// The first load, for its log line: when the loop began, its first event, records read.
	began, first time.Time
	loaded       int
}

// maxWatches bounds the watches of the loop's watch set: past it, a gain restarts one watch of
// all partitions owned, which also drops the filters of those lost since.
const maxWatches = 4

func newLoopWatch(ctx context.Context, b *Bridge, l *loopState, first kvstore.Watcher, parts []int) *loopWatch {
	ws := &loopWatch{ctx: ctx, b: b, l: l, watches: make(chan watchMsg, 1), began: time.Now()}
	if first != nil {
		ws.w = newWatchSet(first, nil, parts)
		ws.events = ws.w.Events()
	}
	// The reconciler leaves alone the partitions a watch is still loading: their records are on
	// their way (review N9).
	l.loading = func(p int) bool { return ws.w != nil && ws.w.isLoading(p) }
	l.loadAny = func() bool { return ws.w != nil && ws.w.anyLoading() }
	b.m.loop.watchUp.Set(1)
	if ws.w == nil { // no partitions of its own yet: nothing to load
		ws.init = true
		close(b.ready)
	}
	return ws
}

// stop ends the watches and waits for the helpers.
func (ws *loopWatch) stop() {
	if ws.w != nil {
		_ = ws.w.Stop()
	}
	if ws.pending != nil {
		ws.pending()
	}
	ws.helpers.Wait()
	select { // a watch started again just as the loop ended
	case nw := <-ws.watches:
		_ = nw.w.Stop()
	default:
	}
}

// start starts a re-watch of parts; with gain, one that joins the running watch.
func (ws *loopWatch) start(parts []int, gain bool) {
	ws.gen++
	rctx, cancel := context.WithCancel(ws.ctx)
	ws.pending = cancel
	g := ws.gen
	ws.helpers.Add(1)
	go func() {
		defer ws.helpers.Done()
		ws.b.rewatch(rctx, ws.watches, watchMsg{parts: parts, gen: g, gain: gain})
	}()
}

// restart starts a watch of parts that replaces the running one, and ends one on its way.
func (ws *loopWatch) restart(parts []int) {
	if ws.pending != nil {
		ws.pending()
		ws.pending = nil
	}
	if len(parts) == 0 {
		ws.gen++
		return
	}
	ws.start(parts, false)
}

// event feeds ev, and up to 255 more that are ready, to the core; ok false: the watch ended.
// It returns false when the loop is to stop.
func (ws *loopWatch) event(ev kvstore.Event, ok bool) bool {
	b, l := ws.b, ws.l
	if !ok {
		_ = ws.w.Stop()
		ws.w, ws.events = nil, nil
		if ws.ctx.Err() != nil {
			return false
		}
		ws.down = time.Now()
		b.m.loop.watchRestarts.Inc()
		b.m.loop.watchUp.Set(0)
		if ws.pending == nil { // else the watch of the new partition set is on its way
			b.log.Warn("task watch ended; starting it again while tasks keep firing from the index")
			ws.restart(l.c.Owned())
		}
		return true
	}
	l.tick()
	if !ws.init && ws.first.IsZero() {
		ws.first = time.Now()
	}
	for n := 0; ; n++ {
		if !ws.init && ev.Kind != kvstore.EventInitDone {
			ws.loaded++
		}
		if ev.Kind == kvstore.EventInitDone && !ws.init {
			ws.init = true
			b.log.Info("tasks recovered from the bucket", "pending", l.c.Len(), "records_read", ws.loaded,
				"took", time.Since(ws.began).Round(time.Millisecond), "first_record_after", ws.first.Sub(ws.began).Round(time.Millisecond))
			close(b.ready)
		} else if ev.Kind == kvstore.EventInitDone {
			b.log.Debug("partitions loaded", "pending", l.c.Len())
		}
		l.apply(ev)
		if n == 255 {
			break
		}
		if ev, ok = tryRecv(ws.events); !ok {
			break
		}
	}
	return true
}

// started takes a watch a re-watch started.
func (ws *loopWatch) started(nw watchMsg) {
	if nw.gen != ws.gen { // a re-watch of a set that changed meanwhile
		_ = nw.w.Stop()
		return
	}
	cancel := ws.pending
	ws.pending = nil
	if nw.gain {
		// A watch of gained partitions joins the running one. If that has ended meanwhile, its
		// restart (once the loop sees the end) covers them.
		if ws.w == nil || !ws.w.add(nw.w, cancel, nw.parts) {
			ws.restart(ws.l.c.Owned())
		}
		return
	}
	if ws.w != nil {
		_ = ws.w.Stop()
	} else {
		ws.b.log.Info("task watch running again", "down_for", time.Since(ws.down).Round(time.Millisecond))
	}
	ws.w = newWatchSet(nw.w, cancel, nw.parts)
	ws.events = ws.w.Events()
	ws.b.m.loop.watchUp.Set(1)
}

// reown takes a change of the partitions owned.
func (ws *loopWatch) reown() {
	b, l := ws.b, ws.l
	o := b.own.Load()
	if slices.Equal(o.parts, l.c.OwnedParts()) {
		return
	}
	l.tick()
	gained := gainedParts(l.c.OwnedParts(), o.parts)
	before := l.c.Len()
	if l.c.Own(o.parts) {
		b.fired.dropIf(func(id string) bool { return !l.c.Owns(id) })
		b.log.Info("partitions moved away: their tasks left the index", "indexed_before", before, "indexed", l.c.Len())
	}
	if len(gained) > 0 && ws.w != nil && ws.pending == nil && ws.w.size() < maxWatches {
		// Load only the gain, so that its tasks fire as soon as it is loaded; the running
		// watch goes on (what it brings of partitions lost, the core ignores).
		ws.w.expect(gained)
		ws.start(gained, true)
	} else {
		if ws.w != nil {
			ws.w.expect(o.owned()) // until the set that replaces it is up
		}
		ws.restart(o.owned())
	}
	if o.n == 0 && ws.w != nil { // nothing to watch until partitions come back
		_ = ws.w.Stop()
		ws.w, ws.events = nil, nil
	}
}

// gainedParts is the partitions owned in next and not in cur.
func gainedParts(cur, next []bool) []int {
	var gained []int
	for p, has := range next {
		if has && (p >= len(cur) || !cur[p]) {
			gained = append(gained, p)
		}
	}
	return gained
}

// tryRecv receives from ch if a value is ready; ok is false otherwise or if ch is closed (the
// next select sees the close).
func tryRecv(ch <-chan kvstore.Event) (kvstore.Event, bool) {
	select {
	case ev, ok := <-ch:
		return ev, ok
	default:
		return kvstore.Event{}, false
	}
}
