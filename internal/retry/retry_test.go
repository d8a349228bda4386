package retry

import (
	"context"
	"testing"
	"time"
)

func TestWaitDoublesToMax(t *testing.T) {
	p := Policy{First: 10 * time.Millisecond, Max: 70 * time.Millisecond}
	want := []time.Duration{10, 20, 40, 70, 70}
	for i, w := range want {
		if got := p.Wait(i + 1); got != w*time.Millisecond {
			t.Errorf("Wait(%d) = %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
	if got := (Policy{First: time.Second}).Wait(50); got != time.Second {
		t.Errorf("constant policy: Wait(50) = %v, want 1s", got)
	}
	if got := (Policy{First: time.Second, Max: time.Hour}).Wait(1 << 20); got != time.Hour {
		t.Errorf("Wait of a huge n = %v, want the Max", got)
	}
}

func TestJitterStaysWithinItsShare(t *testing.T) {
	p := Policy{First: time.Second, Jitter: 0.2}
	lo, hi := time.Duration(1<<62), time.Duration(0)
	for range 2000 {
		d := p.Wait(1)
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo < 800*time.Millisecond || hi > time.Second {
		t.Fatalf("waits in [%v, %v], want within [800ms, 1s]", lo, hi)
	}
	if hi-lo < 100*time.Millisecond {
		t.Fatalf("waits in [%v, %v]: the jitter does not spread them", lo, hi)
	}
	if a, b := p.WaitFor(1, 12345), p.WaitFor(1, 12345); a != b {
		t.Fatalf("WaitFor of one key: %v then %v", a, b)
	}
	if a, b := p.WaitFor(1, 0), p.WaitFor(1, ^uint64(0)); a != time.Second || b <= 800*time.Millisecond || b >= 801*time.Millisecond {
		t.Fatalf("WaitFor of the extreme keys: %v and %v, want 1s and just over 800ms", a, b)
	}
}

func TestBackoffEndsAtTriesOrContext(t *testing.T) {
	b := Backoff{Policy: Policy{Tries: 3}}
	ctx := context.Background()
	n := 1
	for b.Next(ctx) {
		n++
	}
	if n != 3 || b.Failed() != 3 {
		t.Fatalf("%d tries, %d failed; want 3 and 3", n, b.Failed())
	}
	b.Reset()
	if !b.Next(ctx) {
		t.Fatal("Next after Reset: false")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if (&Backoff{Policy: Policy{First: time.Hour}}).Next(cctx) {
		t.Fatal("Next with an ended context waited and reported true")
	}
}

func TestWithin(t *testing.T) {
	if got := NoLeader.Within(5 * time.Second); got != 100 {
		t.Fatalf("NoLeader.Within(5s) = %d, want 100", got)
	}
	if got := NoLeader.Within(-time.Second); got != 0 {
		t.Fatalf("Within of a past deadline = %d, want 0", got)
	}
}
