package bridge

import (
	"context"
	"testing"
)

// A job that carries a partial entry (a watch's initial value: state without payload) is never
// claimed or published from it: load reads the record instead, so the fire carries its payload.
func TestLoadReadsAPartialEntry(t *testing.T) {
	t.Parallel()
	e := newLoopEnv(t, Config{})
	b, err := New(e.nc, e.fs, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	full := e.create("partial", e.clock.in(0))
	part := full
	part.Task.Payload = nil
	part.Partial = true
	got, ok := b.load(context.Background(), job{Kind: jobFire, ID: "partial", Rev: full.Revision, Entry: &part})
	switch {
	case !ok:
		t.Fatal("load failed")
	case got.Partial || string(got.Task.Payload) != "p-partial":
		t.Fatalf("load returned payload %q (partial %v), want the record read back with payload %q",
			got.Task.Payload, got.Partial, "p-partial")
	}
}
