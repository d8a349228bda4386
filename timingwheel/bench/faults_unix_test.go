//go:build unix

package bench

import "syscall"

// minorFaults returns the process's minor page faults so far: first
// touches of memory the kernel had not yet backed.
func minorFaults() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return int64(ru.Minflt)
}
