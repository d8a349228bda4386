package bridge

import (
	"math"
	"testing"
	"time"
)

func TestClockArithmeticSaturates(t *testing.T) {
	now := time.Date(2026, 12, 1, 8, 0, 0, 500_000, time.UTC)
	r := reading{Mono: time.Now(), Wall: now.UnixNano(), Ms: now.UnixMilli()}
	for _, tc := range []struct {
		name string
		due  int64
		want time.Duration
	}{
		{"past", r.Ms - 10, 0},
		{"now", r.Ms, 0},
		{"next ms", r.Ms + 1, 500 * time.Microsecond},
		{"in 300ms", r.Ms + 300, 300*time.Millisecond - 500*time.Microsecond},
		{"far", r.Ms + 3_600_000, time.Second},
		{"year 2262", time.Date(2262, 4, 12, 0, 0, 0, 0, time.UTC).UnixMilli(), time.Second},
		{"max", math.MaxInt64, time.Second},
		{"min", math.MinInt64, 0},
	} {
		if got := r.Until(tc.due, time.Second); got != tc.want {
			t.Errorf("%s: until = %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := addMs(math.MaxInt64-5, time.Hour); got != math.MaxInt64 {
		t.Errorf("addMs saturates at %d, want MaxInt64", got)
	}
	if got := addMs(10, 1500*time.Microsecond); got != 12 {
		t.Errorf("addMs(10, 1.5ms) = %d, want 12 (rounded up: never early)", got)
	}
	if got := subMs(math.MinInt64+5, time.Hour); got != math.MinInt64 {
		t.Errorf("subMs saturates at %d, want MinInt64", got)
	}
	if got := addMs(100, math.MaxInt64); got != 100+int64(math.MaxInt64/time.Millisecond)+1 {
		t.Errorf("addMs(100, MaxInt64) = %d", got)
	}
}

func TestStepDetector(t *testing.T) {
	mono := time.Now()
	wall := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	at := func(monoOff, wallOff time.Duration) reading {
		w := wall.Add(wallOff)
		return reading{Mono: mono.Add(monoOff), Wall: w.UnixNano(), Ms: w.UnixMilli()}
	}
	var d stepDetector
	if _, ok := d.check(at(0, 0)); ok {
		t.Fatal("a step on the first reading")
	}
	if _, ok := d.check(at(500*time.Millisecond, 500*time.Millisecond+time.Millisecond)); ok {
		t.Error("1ms of slew called a step")
	}
	if step, ok := d.check(at(600*time.Millisecond, time.Hour+600*time.Millisecond)); !ok || step < 59*time.Minute {
		t.Errorf("forward 1h: %v, %v", step, ok)
	}
	if step, ok := d.check(at(700*time.Millisecond, 700*time.Millisecond)); !ok || step > -59*time.Minute {
		t.Errorf("back 1h: %v, %v", step, ok)
	}
	// Slewing 0.5 ms a second for a minute is no step: the base moves on every second.
	for s := 1; s <= 60; s++ {
		off := time.Duration(s) * time.Second
		if _, ok := d.check(at(700*time.Millisecond+off, 700*time.Millisecond+off+time.Duration(s)*500*time.Microsecond)); ok {
			t.Fatalf("slew called a step after %ds", s)
		}
	}
}
