//go:build !linux

package redistest

import "os/exec"

// setParentDeathSignal is a no-op where the kernel offers no parent-death
// signal; Start's t.Cleanup and StopShared still stop the server.
func setParentDeathSignal(*exec.Cmd) {}
