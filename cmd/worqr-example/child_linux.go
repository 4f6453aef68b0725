package main

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill the child worker if the demo dies
// first, so that a killed demo leaves no worker behind.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
