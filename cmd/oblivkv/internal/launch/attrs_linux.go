package launch

import "syscall"

// childAttrs put a child in a process group of its own and have the
// kernel send it SIGTERM if the launcher dies first.
func childAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
