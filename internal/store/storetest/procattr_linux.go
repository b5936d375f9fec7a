package storetest

import (
	"os/exec"
	"syscall"
)

// SetParentDeathSignal makes the kernel kill cmd if the test process dies
// first, so an interrupted test run leaves no dynalite behind.
func SetParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
