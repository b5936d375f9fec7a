//go:build !linux

package storetest

import "os/exec"

// SetParentDeathSignal does nothing outside Linux.
func SetParentDeathSignal(*exec.Cmd) {}
