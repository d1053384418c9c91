//go:build !linux

package launch

import "syscall"

// childAttrs are the defaults outside Linux: a terminal's Ctrl-C reaches
// the children as well as the launcher, and they outlive a launcher that
// dies first.
func childAttrs() *syscall.SysProcAttr { return nil }
