package bridge

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/axbridge/axbridge/bridge/internal/sched"
)

// BizStats is one bizType's figures in a stats answer.
type BizStats struct {
	Waiting int `json:"waiting"`
	Running int `json:"running"`
	Dead    int `json:"dead"`
	// Due buckets the WAITING tasks by due time.
	Due struct {
		Overdue int `json:"overdue"`
		Minute  int `json:"within_1m"`
		Hour    int `json:"within_1h"`
		Later   int `json:"later"`
	} `json:"due"`
	OldestOverdue string       `json:"oldest_overdue,omitempty"` // its due time
	OverdueFor    string       `json:"overdue_for,omitempty"`    // how long it has waited past due
	Paused        bool         `json:"paused,omitempty"`
	Lateness      *LateSummary `json:"lateness,omitempty"`
}

// LateSummary is a bizType's fire lateness over the alarm window, from every replica's reports.
type LateSummary struct {
	P50    string `json:"p50"`
	P99    string `json:"p99"`
	Fires  int64  `json:"fires"`
	Window string `json:"window"`
}

// Stats is the stats answer (ax.api.task.stats).
type Stats struct {
	BizTypes   map[string]*BizStats `json:"biz_types"`
	Total      BizStats             `json:"total"`
	Replicas   int                  `json:"replicas"` // that answered
	Partitions int                  `json:"partitions"`
	At         string               `json:"at"`
}

// apiStats answers with the counts of every replica's census, summed, and the lateness reports.
func (b *Bridge) apiStats(ctx context.Context, r micro.Request) {
	st, err := b.stats(ctx)
	if err != nil {
		censusError(r, err)
		return
	}
	_ = r.RespondJSON(st)
}

func (b *Bridge) stats(ctx context.Context) (Stats, error) {
	rs, err := b.askAll(ctx, censusAsk{Op: "count"}, false)
	if err != nil {
		return Stats{}, err
	}
	now := time.Now()
	out := Stats{BizTypes: map[string]*BizStats{}, Replicas: len(rs), Partitions: b.nparts,
		At: now.UTC().Format(DueAtLayout)}
	oldest := map[string]int64{}
	for _, rep := range rs {
		for biz, n := range rep.Counts {
			s := out.BizTypes[biz]
			if s == nil {
				s = &BizStats{}
				out.BizTypes[biz] = s
			}
			s.add(n)
			out.Total.add(n)
			if n.OldestDue != 0 && (oldest[biz] == 0 || n.OldestDue < oldest[biz]) {
				oldest[biz] = n.OldestDue
			}
		}
	}
	for biz, due := range oldest {
		s := out.BizTypes[biz]
		s.OldestOverdue, s.OverdueFor = apiTime(due), (time.Duration(max(now.UnixMilli()-due, 0)) * time.Millisecond).String()
	}
	for biz, l := range b.alarm.p99s(now, b.cfg.AlarmWindow) {
		s := out.BizTypes[biz]
		if s == nil {
			s = &BizStats{}
			out.BizTypes[biz] = s
		}
		s.Lateness = &LateSummary{P50: l.p50.String(), P99: l.p99.String(), Fires: l.n, Window: b.cfg.AlarmWindow.String()}
	}
	for biz, s := range out.BizTypes {
		s.Paused = b.biz.get(biz).Paused
	}
	return out, nil
}

func (s *BizStats) add(n sched.Counts) {
	s.Waiting += n.Waiting
	s.Running += n.Running
	s.Dead += n.Dead
	s.Due.Overdue += n.Overdue
	s.Due.Minute += n.Minute
	s.Due.Hour += n.Hour
	s.Due.Later += n.Later
}

// ReplicaView is one replica in the replicas answer.
type ReplicaView struct {
	ID          string `json:"id"`
	Partitions  []int  `json:"partitions"`
	Owned       int    `json:"owned"`
	Loading     []int  `json:"loading,omitempty"`
	Housekeeper bool   `json:"housekeeper"`
	Indexed     int    `json:"indexed"`
	LeaseLeft   string `json:"lease_left"`
	Members     int    `json:"members"`
}

// ReplicasPage is the replicas answer.
type ReplicasPage struct {
	Replicas   []ReplicaView `json:"replicas"`
	Partitions int           `json:"partitions"`
}

// apiReplicas answers with every replica that answered within the wait, sorted by id.
func (b *Bridge) apiReplicas(ctx context.Context, r micro.Request) {
	rs, err := b.askAll(ctx, censusAsk{Op: "replicas"}, true)
	if err != nil {
		censusError(r, err)
		return
	}
	out := ReplicasPage{Partitions: b.nparts}
	for _, x := range rs {
		out.Replicas = append(out.Replicas, ReplicaView{ID: x.Replica, Partitions: x.Partitions, Owned: len(x.Partitions) + len(x.Loading),
			Loading: x.Loading, Housekeeper: x.Housekeeper, Indexed: x.Indexed, LeaseLeft: x.LeaseLeft, Members: x.Members})
	}
	slices.SortFunc(out.Replicas, func(a, c ReplicaView) int { return strings.Compare(a.ID, c.ID) })
	_ = r.RespondJSON(out)
}
