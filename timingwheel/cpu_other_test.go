//go:build !unix

package timingwheel_test

// cpuTime is not measured here: 0.
func cpuTime() int64 { return 0 }
