package main

import "testing"

// Free held heap is returned only when it is both worth a collection and a fair share of the
// heap in use.
func TestWorthReturning(t *testing.T) {
	for _, c := range []struct {
		free, inUse uint64
		want        bool
	}{
		{0, 0, false},
		{returnMinBytes - 1, 0, false},                // too little to pay for a collection
		{returnMinBytes, 0, true},                     // enough, beside nothing in use
		{returnMinBytes, 100 * returnMinBytes, false}, // a small share of a large heap
		{20 << 20, 200 << 20, true},                   // a tenth
		{19 << 20, 200 << 20, false},                  // under a tenth
	} {
		if got := worthReturning(c.free, c.inUse); got != c.want {
			t.Errorf("worthReturning(%d, %d) = %v, want %v", c.free, c.inUse, got, c.want)
		}
	}
}

// heldFree reads both samples from the runtime: the heap in use is never zero in a running test.
func TestHeldFree(t *testing.T) {
	if _, inUse := heldFree(); inUse == 0 {
		t.Fatal("heap in use reads 0")
	}
}
