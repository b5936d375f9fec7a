package storetest

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal makes the kernel kill cmd if the test process dies
// first, so an interrupted test run leaves no dynalite behind.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
