package bridge

import (
	"context"
	"fmt"
	"time"

	"github.com/axbridge/axbridge/internal/retry"
	"github.com/axbridge/axbridge/kvstore"
)

// watchMsg is a running watch of parts, started by the re-watch of generation gen: with gain,
// of partitions gained, to join the running watch; else of all, to replace it.
type watchMsg struct {
	w     kvstore.Watcher
	parts []int
	gen   uint64
	gain  bool
}

// rewatch starts the task watch of parts (again, after it ended, or for a new set of partitions)
// and hands the running watch to the loop on out; it runs on its own goroutine, so the loop goes
// on firing from its index meanwhile. Each attempt is bounded by Config.WatchTimeout. The first
// failure is logged as a Warn, later ones of the same outage at Debug; the loop logs the recovery.
func (b *Bridge) rewatch(ctx context.Context, out chan<- watchMsg, m watchMsg) {
	for attempt := 1; ; attempt++ {
		w, err := b.startWatch(ctx, m.parts)
		if err == nil {
			m.w = w
			select {
			case out <- m:
			case <-ctx.Done():
				_ = w.Stop()
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		if attempt == 1 {
			b.log.Warn("start task watch; trying again", "err", err)
		} else {
			b.log.Debug("start task watch; trying again", "attempt", attempt, "err", err)
		}
		if !retry.Rewatch.Sleep(ctx, attempt) {
			return
		}
	}
}

// startWatch starts a watch of partitions parts (at least one) that lives until ctx ends or it is
// stopped, giving up after Config.WatchTimeout: the attempt's context is then cancelled, and a
// watch that starts anyway is stopped at once.
func (b *Bridge) startWatch(ctx context.Context, parts []int) (kvstore.Watcher, error) {
	wctx, cancel := context.WithCancel(ctx)
	type started struct {
		w   kvstore.Watcher
		err error
	}
	ch := make(chan started, 1)
	go func() {
		w, err := b.store.Watch(wctx, parts...)
		ch <- started{w, err}
	}()
	t := time.NewTimer(b.cfg.WatchTimeout)
	defer t.Stop()
	select {
	case s := <-ch:
		if s.err != nil {
			cancel()
			return nil, s.err
		}
		return &ownedWatch{Watcher: s.w, cancel: cancel}, nil
	case <-t.C:
		cancel()
		if s := <-ch; s.w != nil { // the store returns once its context is cancelled
			_ = s.w.Stop()
		}
		return nil, fmt.Errorf("watch tasks: no answer within %v", b.cfg.WatchTimeout)
	}
}

// ownedWatch is a watch with the context that bounds its life, cancelled by Stop.
type ownedWatch struct {
	kvstore.Watcher
	cancel context.CancelFunc
}

func (w *ownedWatch) Stop() error {
	err := w.Watcher.Stop()
	w.cancel()
	return err
}
