package sched

import (
	"fmt"
	"testing"
	"time"

	"github.com/axbridge/axbridge/kvstore/record"
)

var fuzzBizTypes = []string{"", "orders", "reports"}

// model is what the bucket holds, as the fuzz's watch and workers see it.
type model struct {
	t       *testing.T
	c       *Core
	now     int64
	rev     uint64
	latest  map[string]record.Entry // id → its newest record
	byRev   map[uint64]record.Entry // every record written
	deleted map[string]bool
	left    map[string]bool // left to the reconciler (reads lagged too often)
}

func newModel(t *testing.T) *model {
	m := &model{t: t, now: 1000, latest: map[string]record.Entry{}, byRev: map[uint64]record.Entry{},
		deleted: map[string]bool{}, left: map[string]bool{}}
	m.c = New(Config{Replica: "r1", Partitions: 2, PreRead: 50 * time.Millisecond, MaxPreReadTasks: 4,
		MaxPreReadBytes: 1 << 20, LeaseSkew: 10 * time.Millisecond, MaxClaims: 4}, []int{0, 1}, m.time())
	return m
}

func (m *model) time() Time {
	return Time{Mono: time.Unix(0, 0).Add(time.Duration(m.now) * time.Millisecond), Wall: m.now * 1e6, Ms: m.now}
}

// write stores a new record of id and delivers its watch event.
func (m *model) write(id string, st record.Status, due int64, claim uint64) {
	m.rev++
	e := record.Entry{Revision: m.rev, Task: record.Task{ID: id, Status: st, DueAt: due, Payload: []byte("p"),
		BizType: fuzzBizTypes[int(id[len(id)-1])%len(fuzzBizTypes)]}} // lanes of their own, and the one of none
	if st == record.StatusRunning {
		e.Task.Owner, e.Task.Claim, e.Task.LeaseUntil = "r1", claim, due+100
	}
	m.latest[id], m.byRev[m.rev] = e, e
	delete(m.deleted, id)
	m.c.Apply(record.Event{Kind: record.EventPut, ID: id, Revision: m.rev, Entry: e})
}

// work hands out every job and plays its worker: the write lands, or it is put back for a retry.
func (m *model) work(ok byte) {
	for {
		j, has := m.c.Next()
		if !has {
			return
		}
		m.c.Sent(j)
		m.checkJob(j)
		cur, live := m.latest[j.ID]
		switch {
		case j.Kind == PreRead:
			var es []record.Entry
			for _, id := range j.IDs {
				if e, ok := m.latest[id]; ok && !m.deleted[id] {
					es = append(es, e)
				}
			}
			m.c.Result(Result{Read: true, Entries: es})
		case !live || m.deleted[j.ID] || cur.Revision != j.Rev:
			// The CAS loses: the watch brings (or brought) the winner.
		case ok%3 == 0:
			m.c.Result(Result{ID: j.ID, Rev: j.Rev, Kind: j.Kind, At: m.now + 20, Retry: true})
		case j.Kind == Fire:
			m.write(j.ID, record.StatusRunning, cur.Task.DueAt, j.Rev)
		case j.Kind == Lease:
			m.write(j.ID, record.StatusWaiting, m.now+30, 0)
		}
		ok /= 3
	}
}

// checkJob: no fire before its due time (less the claim-ahead window), no lease end before it ends.
func (m *model) checkJob(j Job) {
	e, ok := m.byRev[j.Rev]
	if j.Kind == PreRead || !ok {
		return
	}
	switch {
	case j.Kind == Fire && e.Task.Status == record.StatusWaiting && record.SubMs(e.Task.DueAt, j.Ahead) > m.now:
		m.t.Fatalf("fire of %s rev %d due %d handed out at %d", j.ID, j.Rev, e.Task.DueAt, m.now)
	case j.Kind == Lease && e.Task.Status == record.StatusRunning && m.c.leaseDue(&e.Task) > m.now:
		m.t.Fatalf("lease end of %s rev %d handed out at %d, before %d", j.ID, j.Rev, m.now, m.c.leaseDue(&e.Task))
	}
}

// check: the core's counts match its state, it keeps no empty task struct, and every live record
// of an owned partition is indexed or queued at its newest revision (nothing lost).
func (m *model) check() {
	c := m.c
	near, bytes, held, claims := 0, 0, 0, 0
	for id, t := range c.tasks {
		if t.flying && t.fl.claim {
			claims++
		}
		if *t == (task{}) {
			m.t.Fatalf("empty task struct kept for %s", id)
		}
		if t.near != nil {
			near++
			bytes += RecordBytes(&t.near.Task)
		}
		if t.held != nil {
			held++
		}
	}
	if near != c.nearN || bytes != c.nearBytes || held != c.heldN || claims != c.claimsN {
		m.t.Fatalf("counts: near %d/%d bytes %d/%d held %d/%d claims %d/%d", near, c.nearN, bytes, c.nearBytes,
			held, c.heldN, claims, c.claimsN)
	}
	queued := map[string]bool{}
	for _, j := range append(append([]Job(nil), c.fires...), c.house...) {
		queued[j.ID] = true
	}
	for id, e := range m.latest {
		if m.deleted[id] || m.left[id] || e.Task.Status.Final() || !c.Owns(id) {
			continue
		}
		if cur, ok := c.idx.get(id); ok && cur.rev >= e.Revision || queued[id] {
			continue
		}
		m.t.Fatalf("%s lost: newest revision %d (%s), index %v", id, e.Revision, e.Task.Status, fmt.Sprint(c.idx.get(id)))
	}
	m.checkCensus()
}

// checkCensus: the census sees every live and DEAD record of the owned partitions once, with
// its bizType and status, and nothing else.
func (m *model) checkCensus() {
	seen := map[string]scanned{}
	m.c.scan(func(s *scanned) {
		id := string(s.id)
		if _, dup := seen[id]; dup {
			m.t.Fatalf("census: %s twice", id)
		}
		seen[id] = *s
	})
	for id, e := range m.latest {
		s, ok := seen[id]
		delete(seen, id)
		want := !m.deleted[id] && m.c.Owns(id) && (!e.Task.Status.Final() || e.Task.Status == record.StatusDead)
		switch {
		case m.left[id]:
		case ok != want:
			m.t.Fatalf("census: %s (%s, deleted %v) seen %v", id, e.Task.Status, m.deleted[id], ok)
		case ok && (m.c.census.names[s.tag&^seriesTag] != e.Task.BizType || s.status != e.Task.Status || s.due != e.Task.DueAt):
			m.t.Fatalf("census: %s is %s %q due %d, seen as %s %q due %d", id, e.Task.Status, e.Task.BizType,
				e.Task.DueAt, s.status, m.c.census.names[s.tag&^seriesTag], s.due)
		}
	}
	for id := range seen {
		if !m.left[id] {
			m.t.Fatalf("census: %s seen, never written", id)
		}
	}
}

// FuzzCore drives the core with random watch events, worker outcomes, time and ownership, and
// checks it against the model after every step.
func FuzzCore(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte{0, 0, 0, 3, 3, 3, 5, 5, 6, 6, 7, 1, 2, 4, 9, 9, 9, 9, 8})
	f.Fuzz(func(t *testing.T, ops []byte) {
		m := newModel(t)
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%8, ops[i+1]
			id := fmt.Sprintf("t%d", arg%6)
			switch op {
			case 0, 1:
				st := record.StatusWaiting
				if op == 1 && arg%5 == 0 {
					st = record.StatusDead
				}
				m.write(id, st, m.now+int64(arg%120)-10, 0)
			case 2:
				if e, ok := m.latest[id]; ok && !m.deleted[id] {
					m.rev++
					m.deleted[id] = true
					m.c.Apply(record.Event{Kind: record.EventDelete, ID: id, Revision: m.rev})
					_ = e
				}
			case 3, 4:
				m.now += int64(arg % 40)
				m.c.Now(m.time())
			case 5:
				m.c.SetAhead(time.Duration(arg%20) * time.Millisecond)
				m.c.SetLoading(arg%3 == 0)
			case 6:
				before, _ := m.c.Claiming()
				m.c.Take(arg%7 != 0, arg%5 != 0)
				if n, budget := m.c.Claiming(); n > before && n > budget {
					t.Fatalf("Take took fires past the claim budget: %d out, budget %d", n, budget)
				}
				for _, e := range m.c.Ready().Publish {
					if e.Task.DueAt > m.now {
						t.Fatalf("held claim %s published at %d, due %d", e.Task.ID, m.now, e.Task.DueAt)
					}
				}
			case 7:
				m.work(arg)
			}
			for _, id := range m.c.Ready().Behind {
				m.left[id] = true
			}
			m.check()
		}
	})
}
