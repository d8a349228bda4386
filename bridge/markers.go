package bridge

import (
	"context"
	"time"
)

// markerPurger is implemented by stores whose deletes leave markers behind (*kvstore.JetStore).
type markerPurger interface {
	PurgeDeletes(ctx context.Context, olderThan time.Duration) error
}

// purgeMarkers removes, every interval, the delete markers that retention left behind and that are
// older than interval (younger ones stay, so that every watcher sees the delete). Without it a
// bucket that has seen millions of tasks keeps one marker per finished task forever, and every
// replica start reads them all.
func (b *Bridge) purgeMarkers(ctx context.Context, p markerPurger, interval time.Duration) {
	defer b.workers.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		if err := p.PurgeDeletes(pctx, interval); err != nil && ctx.Err() == nil {
			b.log.Warn("purge delete markers", "err", err)
		}
		cancel()
	}
}
