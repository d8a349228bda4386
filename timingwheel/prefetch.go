//go:build amd64 || arm64

package timingwheel

import "unsafe"

// prefetch2 asks the CPU to start loading the cache lines at a and b without
// waiting for them: Add prefetches an entry's index position, which the
// batch that indexes it reads up to pendMax Adds later. A load in Go would
// hold up the Add until the line arrived; a prefetch retires at once. It
// never faults, whatever the addresses.
//
//go:noescape
func prefetch2(a, b unsafe.Pointer)
