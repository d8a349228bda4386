package bench

import (
	"os/exec"
	"syscall"
)

// setChildAttrs makes the kernel kill a server when the bench process dies, however it dies.
func setChildAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
