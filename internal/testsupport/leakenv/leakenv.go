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

// Pick returns the leak of names that Var chooses for protocol, or
// current when Var is unset or names another protocol. A name protocol
// does not have is an error listing those it has.
func Pick[L any](protocol string, current L, names map[string]L) (L, error) {
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
