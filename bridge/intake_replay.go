package bridge

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A deleted intake consumer that is created again (by the bridge or an operator) delivers every
// message still in the stream once more, and the stream keeps them all while the housekeeper does
// not purge (intake_purge.go). A message older than its consumer was in the stream before the
// consumer existed: it may have been stored, fired and finished through a consumer before this
// one. If it is also older than the retention, that task's record may have retired, and storing it
// again would fire a finished task a second time (review N7). Such a message is refused with
// STALE_REPLAY; a younger one finds its record and is a duplicate.

// replayCheckEvery bounds how often an old message makes intake read its consumer's creation time.
const replayCheckEvery = time.Second

// replayGuard knows when the intake consumer was created, by the server's clock.
type replayGuard struct {
	// on: the store reports its retention. after is the age from which a message's task may have
	// retired: the retention in whole seconds (the server's TTLs) less the clock skew margin.
	on    bool
	after time.Duration

	mu      sync.Mutex
	created time.Time // the intake consumer's creation, as last read
	read    time.Time // when it was last read from the server (0: only set by ensureIntake)
}

// consumer records the creation time of the intake consumer ensureIntake set up.
func (g *replayGuard) consumer(ci *jetstream.ConsumerInfo) {
	if ci == nil {
		return
	}
	g.mu.Lock()
	g.created = ci.Created
	g.mu.Unlock()
}

// staleReplay reports whether the schedule message md may repeat a task that retired: it is older
// than the retention and than the intake consumer. A message that is old but not older than the
// consumer as last known reads the consumer again (at most every replayCheckEvery): another
// replica may have created it anew without this one's intake noticing.
func (b *Bridge) staleReplay(md *jetstream.MsgMetadata) bool {
	g := &b.replay
	if !g.on || b.cfg.Now().Sub(md.Timestamp) < g.after {
		return false
	}
	g.mu.Lock()
	created, read := g.created, g.read
	now := time.Now()
	again := !md.Timestamp.Before(created) && (read.IsZero() || now.Sub(read) >= replayCheckEvery)
	if again {
		g.read = now
	}
	g.mu.Unlock()
	if !again {
		return md.Timestamp.Before(created)
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeCallTimeout)
	defer cancel()
	cons, err := b.js.Consumer(ctx, b.cfg.Stream, md.Consumer)
	if err != nil {
		return false
	}
	created = cons.CachedInfo().Created
	g.mu.Lock()
	g.created = created
	g.mu.Unlock()
	return md.Timestamp.Before(created)
}
