package bridge

import (
	"errors"

	dto "github.com/prometheus/client_model/go"

	"github.com/axbridge/axbridge/bridge/internal/membership"
)

// Reasons Health and Readiness report; match with errors.Is.
var (
	ErrNotRunning    = errors.New("bridge: not running")
	ErrIntakeStopped = errors.New("bridge: intake of schedule messages has stopped")
	ErrLoopStopped   = errors.New("bridge: scheduling loop has stopped")
	ErrWatchDown     = errors.New("bridge: task watch is down (being started again)")
	ErrNATSClosed    = errors.New("bridge: NATS connection is closed")
	ErrNATSDown      = errors.New("bridge: NATS connection is down (reconnecting)")
	ErrNotLoaded     = errors.New("bridge: initial load of the bucket is not done")
	// ErrReplicaInUse: another process heartbeats this replica's id. Start fails with it, and a
	// running replica that sees it owns nothing from then on (Stop returns it too).
	ErrReplicaInUse = membership.ErrReplicaInUse
)

// Health says whether this replica is doing its work: nil while it runs, takes schedule messages,
// watches the bucket, has a NATS connection that is not closed and its replica id to itself;
// otherwise the first of those that does not hold. A connection that is down and reconnecting is not a failure of health (see
// Readiness). It reads state the bridge keeps anyway and is safe to call at any time.
func (b *Bridge) Health() error {
	b.mu.Lock()
	state := b.state
	b.mu.Unlock()
	switch {
	case state != stateRunning:
		return ErrNotRunning
	case b.nc.IsClosed():
		return ErrNATSClosed
	case closed(b.intakeEnd):
		return ErrIntakeStopped
	case closed(b.loopEnd):
		return ErrLoopStopped
	case !b.watchUp():
		return ErrWatchDown
	}
	return b.member.Err()
}

// Readiness says whether this replica can take work now: Health holds, the records that existed
// at Start are indexed (Ready is closed) and the NATS connection is up.
func (b *Bridge) Readiness() error {
	if err := b.Health(); err != nil {
		return err
	}
	if !closed(b.ready) {
		return ErrNotLoaded
	}
	if !b.nc.IsConnected() {
		return ErrNATSDown
	}
	return nil
}

// watchUp reads the loop's ax_watch_up gauge, which only the loop sets.
func (b *Bridge) watchUp() bool {
	var m dto.Metric
	if err := b.m.loop.watchUp.Write(&m); err != nil {
		return false
	}
	return m.GetGauge().GetValue() == 1
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
