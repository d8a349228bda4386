package sched

import (
	"fmt"
	"testing"
	"time"

	"github.com/axbridge/axbridge/kvstore/record"
)

// limitCore is a core of one partition at a fixed time, with n due WAITING tasks of bizType
// "lim" and n of "free".
func limitCore(t *testing.T, n int) (*Core, Time) {
	t.Helper()
	now := Time{Mono: time.Unix(1000, 0), Wall: 1000e9, Ms: 1000e3}
	c := New(Config{Replica: "r1", Partitions: 1}, []int{0}, now)
	c.Now(now)
	for i := range n {
		for _, biz := range []string{"lim", "free"} {
			id := fmt.Sprintf("%s-%03d", biz, i)
			c.Apply(record.Event{Kind: record.EventPut, ID: id, Revision: uint64(2*i + 1), Entry: record.Entry{
				Revision: uint64(2*i + 1), Partial: true,
				Task: record.Task{ID: id, BizType: biz, Status: record.StatusWaiting, DueAt: now.Ms - 1}}})
		}
	}
	return c, now
}

// takeAll hands out every queued fire and counts them by bizType.
func takeAll(c *Core) map[string]int {
	got := map[string]int{}
	for {
		j, ok := c.Next()
		if !ok {
			return got
		}
		c.Sent(j)
		if j.Kind == Fire {
			got[j.ID[:len(j.ID)-4]]++
		}
	}
}

// A paused bizType gives no fire; the others go on; resumed, its due tasks are taken.
func TestLimitPauseHoldsOnlyItsBizType(t *testing.T) {
	t.Parallel()
	c, _ := limitCore(t, 10)
	c.SetLimits(map[string]Limit{"lim": {Paused: true, MaxInFlight: -1, Rate: -1}})
	c.Take(true, true)
	if got := takeAll(c); got["lim"] != 0 || got["free"] != 10 {
		t.Fatalf("paused: took %v, want 0 lim and 10 free", got)
	}
	if n, _ := c.Overdue(); n != 0 || c.PausedDue() != 10 {
		t.Fatalf("overdue %d and %d paused, want 0 and 10", n, c.PausedDue())
	}
	if old := c.OldestDue(); len(old) != 0 {
		t.Fatalf("oldest due %v, want none: lim is paused and free went out", old)
	}
	c.SetLimits(map[string]Limit{"lim": NoLimit})
	if old := c.OldestDue(); old["lim"] != c.now.Ms-1 {
		t.Fatalf("resumed: oldest due %v, want lim's", old)
	}
	c.Take(true, true)
	if got := takeAll(c); got["lim"] != 10 {
		t.Fatalf("resumed: took %v, want 10 lim", got)
	}
}

// A bizType with a max in flight has no more fires out than that: the fires taken count until
// their record moves on, RUNNING records count until they settle, whoever claimed them, and a
// loading watch holds the bizType back.
func TestLimitMaxInFlight(t *testing.T) {
	t.Parallel()
	c, now := limitCore(t, 10)
	c.SetLimits(map[string]Limit{"lim": {MaxInFlight: 3, Rate: -1}})
	c.Take(true, true)
	if got := takeAll(c); got["lim"] != 3 || got["free"] != 10 {
		t.Fatalf("took %v, want 3 lim and 10 free", got)
	}
	if n := c.InFlight("lim"); n != 3 {
		t.Fatalf("in flight %d, want 3", n)
	}
	// The three claims land (RUNNING), then one settles.
	for i := range 3 {
		id := fmt.Sprintf("lim-%03d", i)
		rev := uint64(100 + i)
		c.Apply(record.Event{Kind: record.EventPut, ID: id, Revision: rev, Entry: record.Entry{Revision: rev,
			Task: record.Task{ID: id, BizType: "lim", Status: record.StatusRunning, Owner: "r1", LeaseUntil: now.Ms + 30e3}}})
	}
	c.Take(true, true)
	if got := takeAll(c); got["lim"] != 0 || c.InFlight("lim") != 3 {
		t.Fatalf("three RUNNING: took %v with %d in flight, want none and 3", got, c.InFlight("lim"))
	}
	c.Apply(record.Event{Kind: record.EventPut, ID: "lim-000", Revision: 200, Entry: record.Entry{Revision: 200,
		Task: record.Task{ID: "lim-000", BizType: "lim", Status: record.StatusSuccess}}})
	c.SetLoading(true)
	c.Take(true, true)
	if got := takeAll(c); got["lim"] != 0 {
		t.Fatalf("loading: took %v, want none of lim", got)
	}
	c.SetLoading(false)
	c.Take(true, true)
	if got := takeAll(c); got["lim"] != 1 {
		t.Fatalf("one settled: took %v, want 1 lim", got)
	}
	// A RUNNING record of another replica's claim counts too.
	c.Apply(record.Event{Kind: record.EventPut, ID: "other", Revision: 300, Entry: record.Entry{Revision: 300,
		Task: record.Task{ID: "other", BizType: "lim", Status: record.StatusRunning, Owner: "r2", LeaseUntil: now.Ms + 30e3}}})
	if n := c.InFlight("lim"); n != 4 {
		t.Fatalf("in flight %d with another replica's attempt, want 4", n)
	}
}

// A lost partition's own claims count until their lease ends; another replica's stop counting.
func TestLimitLostPartitionClaimsCountUntilLeaseEnd(t *testing.T) {
	t.Parallel()
	now := Time{Mono: time.Unix(1000, 0), Wall: 1000e9, Ms: 1000e3}
	c := New(Config{Replica: "r1", Partitions: 1}, []int{0}, now)
	c.SetLimits(map[string]Limit{"lim": {MaxInFlight: 5, Rate: -1}})
	for i, owner := range []string{"r1", "r2"} {
		id := "run-" + owner
		c.Apply(record.Event{Kind: record.EventPut, ID: id, Revision: uint64(i + 1), Entry: record.Entry{Revision: uint64(i + 1),
			Task: record.Task{ID: id, BizType: "lim", Status: record.StatusRunning, Owner: owner, LeaseUntil: now.Ms + 2000}}})
	}
	c.Own([]bool{false})
	if n := c.InFlight("lim"); n != 1 {
		t.Fatalf("after the move: %d in flight, want 1 (its own claim)", n)
	}
	c.Now(Time{Mono: now.Mono.Add(3 * time.Second), Wall: now.Wall + 3e9, Ms: now.Ms + 3000})
	c.Take(true, true)
	if n := c.InFlight("lim"); n != 0 {
		t.Fatalf("after its lease: %d in flight, want 0", n)
	}
}

// A rate takes fires at most burst at once and then one per 1/rate; Wait sleeps until the
// next token rather than spinning.
func TestLimitRate(t *testing.T) {
	t.Parallel()
	c, now := limitCore(t, 10)
	c.SetLimits(map[string]Limit{"lim": {MaxInFlight: -1, Rate: 2, Burst: 3}})
	c.Take(true, true)
	if got := takeAll(c); got["lim"] != 3 || got["free"] != 10 {
		t.Fatalf("took %v, want the burst of 3 lim and 10 free", got)
	}
	if d := c.Wait(true, time.Second); d < 400*time.Millisecond || d > 510*time.Millisecond {
		t.Fatalf("wait %v, want about 500ms (one token at 2/s)", d)
	}
	later := Time{Mono: now.Mono.Add(time.Second), Wall: now.Wall + 1e9, Ms: now.Ms + 1000}
	c.Now(later)
	c.Take(true, true)
	if got := takeAll(c); got["lim"] != 2 {
		t.Fatalf("a second later: took %v, want 2 lim", got)
	}
}

// A rate share of 0 (a replica that just joined, say) takes no fire, not even its burst.
func TestLimitRateShareZeroTakesNone(t *testing.T) {
	t.Parallel()
	c, _ := limitCore(t, 5)
	c.SetLimits(map[string]Limit{"lim": {MaxInFlight: -1, Rate: 0, Burst: 3}})
	c.Take(true, true)
	if got := takeAll(c); got["lim"] != 0 || got["free"] != 5 {
		t.Fatalf("took %v, want no lim and 5 free", got)
	}
	if d := c.Wait(true, time.Second); d != time.Second {
		t.Fatalf("wait %v, want the limit: nothing can be taken", d)
	}
}
