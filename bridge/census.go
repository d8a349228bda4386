package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge/internal/sched"
	"github.com/axbridge/axbridge/kvstore"
)

// The census (issue 26): each replica answers, for the partitions it owns and has loaded, what
// its scheduling core holds (sched/census.go): the tasks a filter selects, or the counts by
// bizType. The API endpoints (api_list.go) ask every replica at once on <prefix>.stats.census
// and merge the answers, so that they work with any number of replicas and read nothing from
// the bucket but the records of the page they answer with.

// censusAsk is a question for the census, as replicas send it to each other.
type censusAsk struct {
	Op     string       `json:"op"` // list, count or replicas
	Filter censusFilter `json:"filter"`
	Limit  int          `json:"limit,omitempty"`
}

// censusFilter is sched.Filter on the wire.
type censusFilter struct {
	BizType   string           `json:"biz_type,omitempty"`
	Statuses  []kvstore.Status `json:"status,omitempty"`
	DueAfter  int64            `json:"due_after_ms,omitempty"`
	DueBefore int64            `json:"due_before_ms,omitempty"`
	IDPrefix  string           `json:"id_prefix,omitempty"`
	Series    bool             `json:"series,omitempty"`
	AfterDue  int64            `json:"after_due_ms,omitempty"`
	AfterID   string           `json:"after_id,omitempty"`
}

func (f censusFilter) sched() sched.Filter {
	return sched.Filter{BizType: f.BizType, Statuses: f.Statuses, DueAfter: f.DueAfter, DueBefore: f.DueBefore,
		IDPrefix: f.IDPrefix, Series: f.Series, After: sched.Listed{ID: f.AfterID, Due: f.AfterDue}}
}

// censusTask is a listed task on the wire.
type censusTask struct {
	ID      string         `json:"id"`
	BizType string         `json:"biz_type"`
	Status  kvstore.Status `json:"status"`
	Due     int64          `json:"due_ms"`
	Rev     uint64         `json:"revision"`
	Series  bool           `json:"series,omitempty"`
}

// censusReply is one replica's answer.
type censusReply struct {
	Replica    string                  `json:"replica"`
	Partitions []int                   `json:"partitions"` // owned and loaded: what the answer covers
	Loading    []int                   `json:"loading,omitempty"`
	Tasks      []censusTask            `json:"tasks,omitempty"`
	Total      int                     `json:"total"` // tasks the filter selects, on this replica
	Counts     map[string]sched.Counts `json:"counts,omitempty"`
	// Of Op replicas:
	Housekeeper bool   `json:"housekeeper"`
	Indexed     int    `json:"indexed"`
	LeaseLeft   string `json:"lease_left"` // how long it owns its partitions without another heartbeat
	Members     int    `json:"members"`    // live replicas in its view
	Error       string `json:"error,omitempty"`
}

// censusQuestion is a census question for the loop, which runs it on its core.
type censusQuestion struct {
	run   func(l *loopState) censusReply
	reply chan censusReply // buffered: the loop never waits on it
}

// askLoop runs q on the scheduling loop and returns its answer.
func (b *Bridge) askLoop(ctx context.Context, run func(l *loopState) censusReply) (censusReply, error) {
	q := censusQuestion{run: run, reply: make(chan censusReply, 1)}
	select {
	case b.census <- q:
	case <-b.loopEnd:
		return censusReply{}, errors.New("the scheduling loop has stopped")
	case <-ctx.Done():
		return censusReply{}, ctx.Err()
	}
	select {
	case r := <-q.reply:
		return r, nil
	case <-ctx.Done():
		return censusReply{}, ctx.Err()
	}
}

// answerCensus is the loop's side: the partitions it covers, and the answer to ask.
func (l *loopState) answerCensus(ask censusAsk) censusReply {
	r := censusReply{Replica: l.b.cfg.ReplicaID, Partitions: []int{}}
	for _, p := range l.c.Owned() {
		if l.loading(p) {
			r.Loading = append(r.Loading, p)
		} else {
			r.Partitions = append(r.Partitions, p)
		}
	}
	switch ask.Op {
	case "list":
		ls, total := l.c.List(ask.Filter.sched(), ask.Limit)
		r.Total = total
		for _, t := range ls {
			r.Tasks = append(r.Tasks, censusTask{ID: t.ID, BizType: t.BizType, Status: t.Status, Due: t.Due, Rev: t.Rev, Series: t.Series})
		}
	case "count":
		r.Counts = l.c.Count()
	case "replicas":
		r.Indexed = l.c.Len()
	}
	return r
}

// serveCensus answers the other replicas' (and its own) census questions until the
// subscription ends.
func (b *Bridge) serveCensus() (*nats.Subscription, error) {
	return b.nc.Subscribe(b.cfg.subj.stats+"census", func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		var ask censusAsk
		r := censusReply{Replica: b.cfg.ReplicaID}
		if err := json.Unmarshal(m.Data, &ask); err != nil {
			r.Error = "bad census question: " + err.Error()
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), censusWait)
			got, err := b.askLoop(ctx, func(l *loopState) censusReply { return l.answerCensus(ask) })
			cancel()
			if r = got; err != nil {
				r = censusReply{Replica: b.cfg.ReplicaID, Error: err.Error()}
			}
		}
		if ask.Op == "replicas" {
			b.describeReplica(&r)
		}
		data, _ := json.Marshal(r)
		_ = m.Respond(data)
	})
}

// describeReplica adds what the membership goroutine knows of this replica.
func (b *Bridge) describeReplica(r *censusReply) {
	r.Housekeeper = b.house.Load()
	r.Members = int(b.liveMembers.Load())
	if o := b.own.Load(); o != nil {
		r.LeaseLeft = max(time.Until(o.until), 0).Round(time.Millisecond).String()
	}
}

// censusWait bounds a replica's answer; askAll waits a little longer for all of them.
const censusWait = 800 * time.Millisecond
