package main

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Returning idle memory (issue 27 item 6). The bridge's live heap is its index, about 110 bytes
// per pending task; with the default GOGC the heap may grow to twice that before the collector
// runs, and the runtime gives the pages it no longer uses back to the kernel only slowly, so a
// bridge that took a million tasks in through intake held 250–430 bytes of RSS per task for as
// long as it ran. Every interval, returnIdle looks at how much of the heap is free but still held;
// when that is a fair share of what is in use, it collects and returns it (debug.FreeOSMemory),
// which brings the resident set back to about the live heap until the next burst of allocation.

// Free heap held back below these is left alone: returning it costs a full collection.
const (
	returnMinBytes = 16 << 20 // free heap worth a collection
	returnMinShare = 0.10     // of the heap in use
)

// worthReturning says whether free bytes of held heap, beside inUse bytes in use, are worth a
// collection to return.
func worthReturning(free, inUse uint64) bool {
	return free >= returnMinBytes && float64(free) >= returnMinShare*float64(inUse)
}

var idleSamples = []metrics.Sample{
	{Name: "/memory/classes/heap/free:bytes"},    // free, held, not yet returned to the kernel
	{Name: "/memory/classes/heap/objects:bytes"}, // in use by objects, live or not yet swept
}

// heldFree reads the runtime's free held heap and the heap in use.
func heldFree() (free, inUse uint64) {
	metrics.Read(idleSamples)
	return idleSamples[0].Value.Uint64(), idleSamples[1].Value.Uint64()
}

// returnIdle checks every interval until ctx ends, returning free heap worth returning; an
// interval of 0 turns it off.
func returnIdle(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if worthReturning(heldFree()) {
				debug.FreeOSMemory()
			}
		}
	}
}
