package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/kvstore"
)

// gatherWait bounds how long askAll waits for the replicas' answers.
const gatherWait = censusWait + 400*time.Millisecond

// errUncovered is askAll's error when no replica answered for some partitions.
type errUncovered struct{ missing []int }

func (e errUncovered) Error() string {
	ps := make([]string, len(e.missing))
	for i, p := range e.missing {
		ps[i] = strconv.Itoa(p)
	}
	return fmt.Sprintf("no replica answered for %d of the partitions (%s): a replica is starting, stopping or still loading; try again",
		len(e.missing), strings.Join(ps, ", "))
}

// askAll asks every replica (itself among them) and returns their answers once they cover every
// partition, each partition by one answer (the first to cover it; the others are dropped). With
// all set it waits for as many answers as there are live replicas instead (or gatherWait), and
// keeps them all.
func (b *Bridge) askAll(ctx context.Context, ask censusAsk, all bool) ([]censusReply, error) {
	data, err := json.Marshal(ask)
	if err != nil {
		return nil, err
	}
	inbox := b.nc.NewRespInbox()
	ch := make(chan *nats.Msg, 64)
	sub, err := b.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := b.nc.PublishRequest(b.cfg.subj.stats+"census", inbox, data); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, gatherWait)
	defer cancel()
	covered := make([]bool, b.nparts)
	left := b.nparts
	var out []censusReply
	for {
		select {
		case m := <-ch:
			var r censusReply
			if json.Unmarshal(m.Data, &r) != nil || r.Error != "" {
				continue
			}
			if all {
				if out = append(out, r); len(out) >= int(max(b.liveMembers.Load(), 1)) {
					return out, nil
				}
				continue
			}
			if r.Partitions = claimParts(r.Partitions, covered, &left); len(r.Partitions) > 0 {
				out = append(out, r)
			}
			if left == 0 {
				return out, nil
			}
		case <-ctx.Done():
			if all && len(out) > 0 {
				return out, nil
			}
			return nil, errUncovered{missing: uncovered(covered)}
		}
	}
}

// claimParts marks the partitions of ps not covered yet and returns them.
func claimParts(ps []int, covered []bool, left *int) []int {
	var mine []int
	for _, p := range ps {
		if p >= 0 && p < len(covered) && !covered[p] {
			covered[p] = true
			*left--
			mine = append(mine, p)
		}
	}
	return mine
}

func uncovered(covered []bool) []int {
	var ps []int
	for p, ok := range covered {
		if !ok {
			ps = append(ps, p)
		}
	}
	return ps
}

// mergeTasks merges the replicas' lists: each task once, from the answer that covers its
// partition, ordered by due time, then id.
func (b *Bridge) mergeTasks(rs []censusReply) (ts []censusTask, total int) {
	for _, r := range rs {
		mine := map[int]bool{}
		for _, p := range r.Partitions {
			mine[p] = true
		}
		for _, t := range r.Tasks {
			if mine[kvstore.Partition(t.ID, b.nparts)] {
				ts = append(ts, t)
			}
		}
		total += r.Total
	}
	slices.SortFunc(ts, func(a, c censusTask) int {
		if a.Due != c.Due {
			return compareInt(a.Due, c.Due)
		}
		return strings.Compare(a.ID, c.ID)
	})
	return ts, total
}

func compareInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
