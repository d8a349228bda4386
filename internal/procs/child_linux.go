package procs

import (
	"os/exec"
	"syscall"
)

// SetChildAttrs makes the kernel kill a child when its parent dies, however it dies, and puts it
// in its own process group (so a terminal's Ctrl-C reaches the parent only).
func SetChildAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
