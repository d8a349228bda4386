//go:build !amd64 && !arm64

package timingwheel

import "unsafe"

// prefetch2 is a no-op where no prefetch instruction is wired up.
func prefetch2(a, b unsafe.Pointer) {}
