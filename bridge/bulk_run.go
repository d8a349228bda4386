package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/axbridge/axbridge/kvstore"
)

// errSkip: the task changed after its job started; the job leaves it alone.
var errSkip = errors.New("changed since the job started")

// bulkLeaseOf is how long a job stays with its replica without a page written: its pages take at
// most bulkPageTime, and a replica that stops leaves its jobs to the housekeeper after this.
func (b *Bridge) bulkLeaseOf() time.Duration { return max(2*b.cfg.PartitionLease, 5*bulkPageTime) }

// bulkPageTime bounds how long one page of a job takes at its rate: its progress is written that
// often. adoptEvery is how often the housekeeper looks for jobs to resume.
const (
	bulkPageTime = time.Second
	adoptEvery   = 2 * time.Second
)

// runBulk runs job j (its record at revision rev, held by this replica) until it ends, this
// replica stops, or the job is stopped or taken over.
func (b *Bridge) runBulk(j BulkJob, rev uint64) {
	s := &b.svc.api
	s.bulks.Add(1)
	go func() {
		defer s.bulks.Done()
		b.bulkLoop(s.bulkCtx, j, rev)
	}()
}

func (b *Bridge) bulkLoop(ctx context.Context, j BulkJob, rev uint64) {
	lim := rate.NewLimiter(rate.Limit(j.Rate), max(1, int(j.Rate)))
	started, _ := time.Parse(DueAtLayout, j.StartedAt)
	per := min(max(int(j.Rate*bulkPageTime.Seconds()), 1), MaxListLimit)
	for ctx.Err() == nil {
		f := j.Filter
		f.AfterDue, f.AfterID = j.CursorDue, j.CursorID
		rs, err := b.askAll(ctx, censusAsk{Op: "list", Filter: f, Limit: per}, false)
		if err != nil {
			j.LastError = err.Error()
			if !b.saveBulk(ctx, &j, &rev) || !sleepCtx(ctx, time.Second) {
				return
			}
			continue
		}
		ts, _ := b.mergeTasks(rs)
		if len(ts) == 0 {
			j.State, j.FinishedAt = "done", apiTime(b.cfg.Now().UnixMilli())
			if b.saveBulk(ctx, &j, &rev) {
				b.audit(j)
			}
			return
		}
		ts = ts[:min(len(ts), per)]
		if !b.bulkPage(ctx, &j, ts, lim, started.UnixMilli()) {
			// Stopping: the progress so far is written, with the page's start as the cursor and
			// a lease that has ended, so that the housekeeper resumes the job at once (what this
			// page changed counts as skipped then).
			j.LeaseUntil = apiTime(b.cfg.Now().UnixMilli())
			b.saveBulk(ctx, &j, &rev)
			return
		}
		last := ts[len(ts)-1]
		j.CursorDue, j.CursorID = last.Due, last.ID
		if !b.saveBulk(ctx, &j, &rev) {
			return
		}
	}
}

// bulkParallel bounds a job's writes in flight: one at a time, a job on a replicated bucket
// would take a write's round trip per task, far below its rate.
const bulkParallel = 32

// bulkPage applies the job's action to the tasks of one page, at the job's pace, up to
// bulkParallel at once; false if ctx ended first (the writes in flight are seen through).
func (b *Bridge) bulkPage(ctx context.Context, j *BulkJob, ts []censusTask, lim *rate.Limiter, started int64) bool {
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, bulkParallel)
	wctx := context.WithoutCancel(ctx)
	ok := true
	for _, t := range ts {
		if lim.Wait(ctx) != nil {
			ok = false
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			defer func() { <-sem }()
			err := b.bulkOne(wctx, j, id, started)
			mu.Lock()
			defer mu.Unlock()
			j.count(id, err)
		}(t.ID)
	}
	wg.Wait()
	return ok
}

// count adds one task's outcome to the job's counts.
func (j *BulkJob) count(id string, err error) {
	switch {
	case err == nil:
		j.Done++
	case errors.Is(err, errSkip), errors.Is(err, kvstore.ErrTransition), errors.Is(err, kvstore.ErrNotFound):
		j.Skipped++
	default:
		j.Failed++
		j.LastError = id + ": " + err.Error()
	}
}

// bulkOne applies the job's action to one task. It only reads j.
func (b *Bridge) bulkOne(ctx context.Context, j *BulkJob, id string, started int64) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	var err error
	if j.Action == "delete" {
		err = b.bulkDelete(ctx, id, started)
	} else {
		_, err = b.transition(ctx, id, func(t kvstore.Task, now int64) (kvstore.Task, error) {
			if t.UpdatedAt > started {
				return t, errSkip
			}
			switch j.Action {
			case "requeue":
				return kvstore.Requeue(t, now, now)
			case "cancel":
				return kvstore.Cancel(t, now)
			}
			due, msg := b.cfg.rescheduleDue(rescheduleReq{Delay: j.Delay, DueAt: j.DueAt}, time.UnixMilli(now))
			if msg != "" {
				return t, errors.New(msg)
			}
			return kvstore.Reschedule(t, now, due)
		})
	}
	return err
}

// bulkDelete deletes task id unless it is RUNNING (an attempt is out) or changed after started.
func (b *Bridge) bulkDelete(ctx context.Context, id string, started int64) error {
	for range 5 {
		e, err := b.store.Get(ctx, id)
		switch {
		case err != nil:
			return err
		case e.Task.UpdatedAt > started:
			return errSkip
		case e.Task.Status == kvstore.StatusRunning:
			return kvstore.ErrTransition
		}
		if err = b.store.Delete(ctx, id, e.Revision); !errors.Is(err, kvstore.ErrConflict) {
			return err
		}
	}
	return errChanging
}

// saveBulk writes the job's progress by CAS and renews its lease; false if the job is no longer
// this replica's to run (stopped, or taken over), or ctx ended.
func (b *Bridge) saveBulk(ctx context.Context, j *BulkJob, rev *uint64) bool {
	kv := b.svc.biz.kv
	now := b.cfg.Now()
	j.UpdatedAt = apiTime(now.UnixMilli())
	switch {
	case j.State != "running":
		j.LeaseUntil = ""
	case ctx.Err() == nil:
		j.LeaseUntil = apiTime(now.Add(b.bulkLeaseOf()).UnixMilli())
	}
	data, _ := json.Marshal(j)
	wctx, cancel := withDefaultTimeout(context.WithoutCancel(ctx))
	defer cancel()
	r, err := kv.Update(wctx, "bulk."+j.Job, data, *rev)
	if err != nil {
		b.log.Info("bulk job: progress not written; leaving the job", "job", j.Job, "err", err)
		return false
	}
	*rev = r
	return ctx.Err() == nil
}

// adoptBulks runs, while this replica is the housekeeper, the jobs whose replica's lease has
// ended, from where they were; it checks every adoptEvery until ctx ends.
func (b *Bridge) adoptBulks(ctx context.Context) {
	tick := time.NewTicker(adoptEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if b.house.Load() {
			b.adoptOnce(ctx)
		}
	}
}

func (b *Bridge) adoptOnce(ctx context.Context) {
	kv := b.svc.biz.kv
	keys, err := kv.ListKeysFiltered(ctx, "bulk.*")
	if err != nil {
		return
	}
	for key := range keys.Keys() {
		e, err := kv.Get(ctx, key)
		var j BulkJob
		if err != nil || json.Unmarshal(e.Value(), &j) != nil || j.State != "running" {
			continue
		}
		if until, err := time.Parse(DueAtLayout, j.LeaseUntil); err == nil && b.cfg.Now().Before(until) {
			continue
		}
		from := j.Replica
		j.Replica = b.cfg.ReplicaID
		rev := e.Revision()
		if b.saveBulk(ctx, &j, &rev) {
			b.log.Info("bulk job resumed: its replica stopped", "job", j.Job, "from", from, "done", j.Done)
			b.runBulk(j, rev)
		}
	}
	_ = keys.Stop()
}

// sleepCtx waits d unless ctx ends first; false if it did.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
