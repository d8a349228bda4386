//go:build !unix

package bench

// minorFaults is not measured here.
func minorFaults() int64 { return 0 }
