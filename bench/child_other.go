//go:build !linux

package bench

import "os/exec"

// setChildAttrs: elsewhere the servers are stopped by the bench's own teardown only.
func setChildAttrs(*exec.Cmd) {}
