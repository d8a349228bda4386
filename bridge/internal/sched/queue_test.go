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
