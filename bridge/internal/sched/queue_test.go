package sched

import "testing"

// A backlog of fires does not hold lease ends back for good: one goes out after every houseEvery
// fires, and fires still go first when nothing else waits.
func TestLeaseEndsInterleaveWithAFireBacklog(t *testing.T) {
	t.Parallel()
	c := New(Config{Partitions: 1}, nil, Time{})
	for range 3 * houseEvery {
		c.fires = append(c.fires, Job{Kind: Fire, ID: "f"})
	}
	c.house = []Job{{Kind: Lease, ID: "lease"}}
	for i := 0; ; i++ {
		j, _ := c.Next()
		if j.Kind == Lease {
			if i != houseEvery {
				t.Errorf("the lease end went out after %d fires, want %d", i, houseEvery)
			}
			break
		}
		if i > houseEvery {
			t.Fatalf("no lease end after %d fires", i)
		}
		c.Sent(j)
	}
	c.Sent(Job{Kind: Lease, ID: "lease"})
	if len(c.house) != 0 || len(c.fires) != 2*houseEvery {
		t.Errorf("queues after: %d house, %d fires; want 0 and %d", len(c.house), len(c.fires), 2*houseEvery)
	}
	if j, _ := c.Next(); j.Kind != Fire {
		t.Errorf("next job %v, want a fire", j.Kind)
	}
}

// At most maxReadsOut pre-reads are in workers' hands at once, so that a burst entering the
// pre-read window leaves workers to the fires due now; the next goes out once one reports.
func TestPreReadsInHandBounded(t *testing.T) {
	t.Parallel()
	c := New(Config{Partitions: 1}, nil, Time{})
	for range maxReadsOut + 2 {
		c.house = append(c.house, Job{Kind: PreRead, IDs: []string{"r"}})
	}
	for range maxReadsOut {
		j, ok := c.Next()
		if !ok || j.Kind != PreRead {
			t.Fatalf("job %v %v, want a pre-read", j.Kind, ok)
		}
		c.Sent(j)
	}
	if j, ok := c.Next(); ok {
		t.Fatalf("with %d pre-reads out: handed %v, want nothing", maxReadsOut, j.Kind)
	}
	c.fires = []Job{{Kind: Fire, ID: "f"}}
	if j, _ := c.Next(); j.Kind != Fire {
		t.Fatalf("a fire behind the held pre-reads: got %v", j.Kind)
	}
	c.Sent(Job{Kind: Fire, ID: "f"})
	c.Result(Result{Read: true}) // a pre-read that read nothing still reports
	if j, ok := c.Next(); !ok || j.Kind != PreRead {
		t.Fatalf("after a pre-read reported: %v %v, want a pre-read", j.Kind, ok)
	}
}
