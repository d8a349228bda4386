package main

import (
	"io"
	"testing"

	"github.com/axbridge/axbridge/kvstore"
)

func TestWriteBatchFlag(t *testing.T) {
	if o, err := parseFlags(nil, io.Discard); err != nil || o.writeBatch != kvstore.BatchAuto {
		t.Fatalf("default --write-batch: %d, %v; want auto (%d)", o.writeBatch, err, kvstore.BatchAuto)
	}
	for arg, want := range map[string]int{"auto": kvstore.BatchAuto, "1": 1, "1000": 1000} {
		if o, err := parseFlags([]string{"--write-batch", arg}, io.Discard); err != nil || o.writeBatch != want {
			t.Errorf("--write-batch %s: %d, %v; want %d", arg, o.writeBatch, err, want)
		}
	}
	for _, arg := range []string{"0", "1001", "-1", "big"} {
		if _, err := parseFlags([]string{"--write-batch", arg}, io.Discard); err == nil {
			t.Errorf("--write-batch %s accepted", arg)
		}
	}
	t.Setenv("AX_WRITE_BATCH", "auto")
	if o, err := parseFlags([]string{}, io.Discard); err != nil || o.writeBatch != kvstore.BatchAuto {
		t.Errorf("AX_WRITE_BATCH=auto: %d, %v", o.writeBatch, err)
	}
}
