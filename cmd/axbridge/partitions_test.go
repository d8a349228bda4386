package main

import (
	"io"
	"testing"
)

// --partitions (default 60) is passed to the store only when given, so that an existing bucket
// keeps its own count (kvstore's TestJetStoreAdoptsPartitions) and raising the default does not
// lock out buckets created before.
func TestPartitionsOfExistingBucket(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.partitions != 60 || o.partitionsSet {
		t.Errorf("default: partitions %d, set %v; want 60, false", o.partitions, o.partitionsSet)
	}
	if o, _ := parseFlags([]string{"--partitions", "16"}, io.Discard); o.partitions != 16 || !o.partitionsSet {
		t.Errorf("--partitions 16: partitions %d, set %v", o.partitions, o.partitionsSet)
	}
	t.Setenv("AX_PARTITIONS", "12")
	if o, _ := parseFlags(nil, io.Discard); o.partitions != 12 || !o.partitionsSet {
		t.Errorf("AX_PARTITIONS=12: partitions %d, set %v", o.partitions, o.partitionsSet)
	}

}
