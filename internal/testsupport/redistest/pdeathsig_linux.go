package redistest

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal makes the kernel kill the server if the test process
// dies without stopping it.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
