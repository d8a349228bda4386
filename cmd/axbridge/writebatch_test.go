package main

import (
	"io"
	"strings"
	"testing"

	"github.com/axbridge/axbridge/kvstore"
)

func TestWriteBatchFlag(t *testing.T) {
	if o, err := parseFlags(nil, io.Discard); err != nil || o.writeBatch != kvstore.DefaultBatchMax {
		t.Fatalf("default --write-batch: %d, %v; want %d", o.writeBatch, err, kvstore.DefaultBatchMax)
	}
	for arg, want := range map[string]int{"1": 1, "64": 64, "1000": 1000} {
		if o, err := parseFlags([]string{"--write-batch", arg}, io.Discard); err != nil || o.writeBatch != want {
			t.Errorf("--write-batch %s: %d, %v; want %d", arg, o.writeBatch, err, want)
		}
	}
	for _, arg := range []string{"0", "1001", "-1", "big"} {
		if _, err := parseFlags([]string{"--write-batch", arg}, io.Discard); err == nil {
			t.Errorf("--write-batch %s accepted", arg)
		}
	}
	// The automatic mode is gone: its name is refused with what to do instead.
	_, err := parseFlags([]string{"--write-batch", "auto"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "group commit") {
		t.Errorf("--write-batch auto: %v; want a refusal that says grouping is automatic now", err)
	}
	t.Setenv("AX_WRITE_BATCH", "200")
	if o, err := parseFlags([]string{}, io.Discard); err != nil || o.writeBatch != 200 {
		t.Errorf("AX_WRITE_BATCH=200: %d, %v", o.writeBatch, err)
	}
}
