// Package leakenv lets a test build of oblivkv choose one of a protocol's
// injected leaks (protocol/<name>/leak.go) from the environment, so that
// a test can show `oblivkv audit` reporting it. Only files behind the
// oblivkv_leaks build tag import it (protocol/<name>/leak_env.go); a
// default build never reads the variable and has no way to inject a
// leak. It must never be imported by code built without that tag.
package leakenv

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
)

// Var is the environment variable: PROTOCOL/LEAK, e.g.
// treebeard/evict_on_real_reads.
const Var = "OBLIVKV_LEAK"

// Hook returns the function a protocol's open calls on the leak its
// Options' TestingKnobs give (its envLeak), which each protocol's
// leak_env.go installs with its table of names: it returns the leak of
// names that Var chooses for protocol, or the leak given when Var is
// unset or names another protocol. A name protocol does not have is an
// error listing those it has.
func Hook[L any](protocol string, names map[string]L) func(L) (L, error) {
	return func(current L) (L, error) { return pick(protocol, current, names) }
}

func pick[L any](protocol string, current L, names map[string]L) (L, error) {
	p, name, _ := strings.Cut(os.Getenv(Var), "/")
	if p != protocol {
		return current, nil
	}
	l, ok := names[name]
	if !ok {
		return current, fmt.Errorf("%s: %s has no leak %q (it has %v)", Var, protocol, name, slices.Sorted(maps.Keys(names)))
	}
	return l, nil
}
