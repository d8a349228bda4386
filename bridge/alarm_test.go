package bridge

import (
	"testing"
	"time"
)

// Buckets are 2^(1/4) apart: a lateness falls in the bucket whose bound is the first at or above it.
func TestLateBuckets(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, time.Millisecond, 3 * time.Millisecond, 250 * time.Millisecond, 2 * time.Second, time.Hour} {
		i := lateBucket(d)
		if lateBound(i) < d || i > 0 && lateBound(i-1) >= d {
			t.Errorf("%v in bucket %d of bounds %v..%v", d, i, lateBound(max(i-1, 0)), lateBound(i))
		}
	}
	if got := lateBucket(100 * time.Hour); got != lateBuckets-1 {
		t.Errorf("100h in bucket %d, want the last, %d", got, lateBuckets-1)
	}
}

// The p99 is of every replica's reports together, within the window: 98 fires on time from one
// replica and 2 late ones from another make a late p99; once the late report leaves the window,
// the p99 is on time.
func TestAlarmP99MergesReplicasWithinWindow(t *testing.T) {
	t.Parallel()
	r1, r2 := newAlarms(), newAlarms()
	for range 98 {
		r1.observe("orders", 2*time.Millisecond)
	}
	r2.observe("orders", 2*time.Second)
	r2.observe("orders", 2*time.Second)
	judge := newAlarms()
	t0 := time.Now()
	judge.hear(r2.take("r2"), t0)
	judge.hear(r1.take("r1"), t0.Add(2*time.Second))
	got := judge.p99s(t0.Add(2*time.Second), 5*time.Second)["orders"]
	if got.n != 100 || got.p99 < 2*time.Second || got.p99 > 2400*time.Millisecond {
		t.Fatalf("p99 %v of %d fires, want about 2s of 100", got.p99, got.n)
	}
	got = judge.p99s(t0.Add(6*time.Second), 5*time.Second)["orders"]
	if got.n != 98 || got.p99 > 3*time.Millisecond {
		t.Fatalf("after the late report left the window: p99 %v of %d, want about 2ms of 98", got.p99, got.n)
	}
	if r1.take("r1").Biz["orders"] != nil {
		t.Error("take did not start anew")
	}
}
