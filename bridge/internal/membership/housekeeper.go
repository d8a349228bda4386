package membership

import (
	"context"
	"errors"
	"time"

	"github.com/axbridge/axbridge/kvstore"
)

// HousekeeperKey is the key of the membership bucket whose holder is the housekeeper.
const HousekeeperKey = "housekeeper"

// housekeeper is the state of the election (doc.go). Owned by the member's goroutine.
type housekeeper struct {
	rev   uint64    // the key's revision this replica wrote last; 0 unless it holds the post
	until time.Time // it holds the post until then (Clock), unless a write renews it
	sent  time.Time // when the write in flight, or the last one, was sent
	busy  bool      // a write is in flight
	is    bool      // this replica counts itself housekeeper
}

type houseResult struct {
	rev uint64
	err error
}

// every is how often the housekeeper key is written.
func (m *Member) every() time.Duration { return m.cfg.Lease / 3 }

// campaign renews the post this replica holds, or tries to take it.
func (m *Member) campaign() {
	h := &m.house
	if h.busy || m.fs.phase == ousted {
		return
	}
	h.sent, h.busy = m.cfg.Clock.Now(), true
	rev, renew := h.rev, h.rev != 0 && h.sent.Before(h.until)
	if !renew {
		h.rev = 0
	}
	m.async(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, m.every())
		var r houseResult
		if renew {
			r.rev, r.err = m.cfg.Store.Renew(ctx, HousekeeperKey, m.cfg.ReplicaID, rev, m.cfg.Lease)
		} else {
			r.rev, r.err = m.cfg.Store.Campaign(ctx, HousekeeperKey, m.cfg.ReplicaID, m.cfg.Lease)
		}
		cancel()
		m.houses <- r
	})
}

// elected takes a write's result and returns when the next write is due.
func (m *Member) elected(r houseResult) time.Duration {
	h := &m.house
	h.busy = false
	switch {
	case r.err == nil:
		h.rev, h.until = r.rev, h.sent.Add(m.cfg.Lease-m.cfg.margin())
	case errors.Is(r.err, kvstore.ErrConflict):
		h.rev = 0 // another replica holds it
	case m.ctx.Err() != nil:
	default:
		m.cfg.Logger.Debug("housekeeper lease", "err", r.err)
	}
	now := m.cfg.Clock.Now()
	m.setHouse(h.rev != 0 && now.Before(h.until))
	return max(m.every()-now.Sub(h.sent), 0)
}

func (m *Member) setHouse(is bool) {
	if is != m.house.is {
		m.house.is = is
		m.cfg.Housekeeper(is)
		m.cfg.Logger.Info("housekeeper", "replica", m.cfg.ReplicaID, "is", is)
	}
	if is {
		m.cfg.Metrics.Housekeeper.Set(1)
	} else {
		m.cfg.Metrics.Housekeeper.Set(0)
	}
}

// resign gives the post up as the member stops, so that another replica takes it at once.
func (m *Member) resign() {
	h := &m.house
	if h.is {
		m.house.is = false
		m.cfg.Housekeeper(false)
	}
	m.cfg.Metrics.Housekeeper.Set(0)
	if h.rev != 0 && m.cfg.Clock.Now().Before(h.until) {
		ctx, cancel := context.WithTimeout(context.Background(), m.every())
		_ = m.cfg.Store.Resign(ctx, HousekeeperKey, h.rev)
		cancel()
	}
}
