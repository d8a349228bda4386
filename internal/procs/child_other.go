//go:build !linux

package procs

import "os/exec"

// SetChildAttrs: elsewhere children are stopped by their parent's own teardown only.
func SetChildAttrs(*exec.Cmd) {}
