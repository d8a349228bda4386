package bridge

import "testing"

// A backlog of fires does not hold lease ends back for good: one goes out after every houseEvery
// fires, and fires still go first when nothing else waits.
func TestLeaseEndsInterleaveWithAFireBacklog(t *testing.T) {
	t.Parallel()
	l := &loopState{b: &Bridge{jobs: make(chan job)}}
	for range 3 * houseEvery {
		l.fires = append(l.fires, job{Kind: jobFire, ID: "f"})
	}
	l.house = []job{{Kind: jobLease, ID: "lease"}}
	for i := 0; ; i++ {
		_, j := l.nextJob()
		if j.Kind == jobLease {
			if i != houseEvery {
				t.Errorf("the lease end went out after %d fires, want %d", i, houseEvery)
			}
			break
		}
		if i > houseEvery {
			t.Fatalf("no lease end after %d fires", i)
		}
		l.sent(j)
	}
	l.sent(job{Kind: jobLease, ID: "lease"})
	if len(l.house) != 0 || len(l.fires) != 2*houseEvery {
		t.Errorf("queues after: %d house, %d fires; want 0 and %d", len(l.house), len(l.fires), 2*houseEvery)
	}
	if _, j := l.nextJob(); j.Kind != jobFire {
		t.Errorf("next job %v, want a fire", j.Kind)
	}
}
