package membership

import (
	"context"
	"time"

	"github.com/axbridge/axbridge/kvstore"
)

// The member's store calls run off its goroutine, each bounded by a timeout (the watch by the
// member's life), and send their results back on a channel with room for all of them: a
// heartbeat's lasts less than a lease, so at most five tick's, a fenced one's and a claim's are
// in flight, and there is at most one leave, one watch and one housekeeper write.

type beatResult struct {
	sent   time.Time
	seq    uint64
	join   bool
	fenced bool // it said this replica is fenced
	err    error
}

type watchResult struct {
	events <-chan kvstore.MemberEvent
	err    error
}

// heartbeat writes this replica's key. It may take until the fence it would renew ends: a
// confirmation that comes later renews nothing. A fenced one tells the others to take this
// replica's share; from then on only a heartbeat sent later renews the fence.
func (m *Member) heartbeat(join, fenced bool) {
	sent := m.cfg.Clock.Now()
	m.seq++
	seq := m.seq
	if fenced {
		m.renewAfter, m.told = seq, true
	}
	m.pending++
	value := beat{m.nonce, seq, fenced}.value()
	m.async(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, m.cfg.Lease-m.cfg.margin())
		err := m.cfg.Store.Heartbeat(ctx, m.cfg.ReplicaID, value, m.cfg.Lease)
		cancel()
		m.beats <- beatResult{sent, seq, join, fenced, err}
	})
}

// beaten takes a heartbeat's result.
func (m *Member) beaten(r beatResult) {
	now := m.cfg.Clock.Now()
	m.pending--
	if r.err != nil {
		m.cfg.Metrics.HeartbeatErrors.Inc()
		if !m.failing {
			m.failing = true
			m.cfg.Logger.Warn("heartbeat failed; this replica gives up its partitions if none is confirmed within the lease",
				"replica", m.cfg.ReplicaID, "err", r.err)
		}
	} else {
		if m.failing {
			m.failing = false
			m.cfg.Logger.Info("heartbeats confirmed again", "replica", m.cfg.ReplicaID)
		}
		switch p := m.fs.phase; {
		case !r.fenced && r.seq > m.renewAfter:
			if f := r.sent.Add(m.cfg.Lease - m.cfg.margin()); f.After(m.fence) {
				m.fence = f
				if now.Before(f) {
					m.step(renewed)
					m.told = m.told && m.fs.phase != owning
				}
			}
		case r.fenced && r.seq == m.renewAfter && (p == fenced || p == overdue || p == joining) &&
			now.Sub(r.sent) <= m.cfg.Lease/2 && (m.cfg.Conn == nil || m.cfg.Conn.IsConnected()):
			// Confirmed fast enough to keep a fence again: it claims its share back.
			m.heartbeat(r.join, false)
			return
		}
	}
	if r.join {
		m.step(joinDone)
	}
}

// leave ends this replica's ownership now and deletes its key, so that the others take its
// partitions at once; from now on only heartbeats sent later renew the fence.
func (m *Member) leave() {
	now := m.cfg.Clock.Now()
	m.fence, m.renewAfter = minTime(m.fence, now), m.seq
	m.publish()
	m.async(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, m.cfg.Lease-m.cfg.margin())
		err := m.cfg.Store.Leave(ctx, m.cfg.ReplicaID)
		cancel()
		m.leaves <- err
	})
}

// leaveEnded takes a leave's result.
func (m *Member) leaveEnded(err error) {
	if err != nil {
		m.cfg.Logger.Debug("leave while fenced", "replica", m.cfg.ReplicaID, "err", err)
		m.step(leaveFailed)
		return
	}
	m.cfg.Metrics.FencedLeaves.Inc()
	m.cfg.Logger.Info("left the replicas while fenced: the others take this replica's partitions now", "replica", m.cfg.ReplicaID)
	m.step(leaveDone)
}

// watch starts the members watch again.
func (m *Member) watch() {
	m.async(func(ctx context.Context) {
		events, err := m.cfg.Store.WatchMembers(ctx)
		m.watched <- watchResult{events, err}
	})
}

// async runs call off the goroutine; run waits for it before it returns.
func (m *Member) async(call func(ctx context.Context)) {
	m.calls.Add(1)
	go func() {
		defer m.calls.Done()
		call(m.ctx)
	}()
}

// connTurn is what a heartbeat tick, a change of the connection's state or the end of its grace
// does: heartbeats go at the ticks, and only while the connection is up.
func (m *Member) connTurn(isTick bool, downTimer Timer) {
	if m.cfg.Conn != nil && !m.cfg.Conn.IsConnected() {
		// Heartbeats may travel on a connection of their own: they must not keep this replica
		// the owner of partitions in which its own connection does nothing.
		grace := m.cfg.Lease / 4
		now := m.cfg.Clock.Now()
		if m.downSince.IsZero() {
			m.downSince = now
			downTimer.Reset(grace)
		}
		if isTick {
			m.cfg.Metrics.HeartbeatErrors.Inc()
		}
		if !m.failing {
			m.failing = true
			m.cfg.Logger.Warn("no heartbeat while this replica's NATS connection is down; it gives up its partitions and leaves if it stays down",
				"replica", m.cfg.ReplicaID, "after", grace)
		}
		if now.Sub(m.downSince) >= grace {
			m.step(down)
		}
		return
	}
	if !m.downSince.IsZero() {
		m.downSince = time.Time{}
		downTimer.Stop()
	}
	if isTick {
		m.step(tick)
	}
}
