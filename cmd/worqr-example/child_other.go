//go:build !linux

package main

import "os/exec"

// setDeathSignal does nothing where the kernel has no parent-death signal: a
// child left behind by a killed demo exits after its work time.
func setDeathSignal(*exec.Cmd) {}
