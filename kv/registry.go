package kv

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"sync"

	"github.com/oblivkv/oblivkv/audit/auditspec"
)

// Protocol describes one protocol: the one record the rest of the program
// (Open, the command line's --opt and its option listing, `oblivkv info`,
// bench --compare and `oblivkv audit`) reads about it.
type Protocol struct {
	// Name is what Config.Protocol and --protocol call it, e.g. "treebeard".
	Name string
	// Summary says in one line what the protocol is and what it hides.
	Summary string
	// Open opens the protocol's store.
	Open Factory
	// Options is the zero value of the protocol's Options struct (what
	// Env.Options holds), nil for a protocol that takes no options. Its
	// exported int, float64 and time.Duration fields are the options a
	// deployment can set by name; each carries an `opt` tag (one sentence
	// saying what it does) and a `default` tag (its default, either as a
	// value an option setting parses, or a description such as
	// "ceil(sqrt(N))" for a default that depends on the store). The type
	// has the methods of kv.Options (EnsureDefaults, Validate), and its
	// hooks for tests, which are no options, in a TestingKnobs field.
	Options any
	// Hides is what the protocol hides from storage: every oblivious
	// protocol hides which key is accessed (the zero value); an insecure
	// baseline hides less. bench --compare runs the protocols that hide
	// least first, the first of them the reference of its ratios, and the
	// audit runs enough requests on an insecure baseline for its attacker
	// to rank the popular keys.
	Hides Hides
	// Audit is the protocol's registration with `oblivkv audit`: its
	// address prefixes, how the audit drives its clock, its own checks of
	// storage's view (nil: none, only the audit's generic ones).
	Audit *auditspec.Spec
	// Reseal returns the protocol's Resealer for `oblivkv rekey` (an
	// error for a ResealEnv.State it cannot decode); nil for a protocol
	// rekey does not support.
	Reseal func(ResealEnv) (Resealer, error)
}

// Hides says what a protocol hides from storage.
type Hides int

// What a protocol hides, from most to least.
const (
	// HidesAccesses: which key is accessed, how often and when, as well
	// as keys and values: every oblivious protocol.
	HidesAccesses Hides = iota
	// HidesContents: keys and values, not which key is accessed, how
	// often or when (the encrypted baseline).
	HidesContents
	// HidesNothing: keys and values are stored as given (the plain
	// baseline).
	HidesNothing
)

// Insecure reports whether p is an insecure baseline: one that does not
// hide which key is accessed.
func (p Protocol) Insecure() bool { return p.Hides != HidesAccesses }

var (
	registryMu sync.RWMutex
	registry   = map[string]Protocol{}
)

// Register makes a protocol available to Open. It panics on a duplicate
// or empty name, a missing Open, or Options that are not a struct, as
// those are programming errors.
func Register(p Protocol) {
	switch {
	case p.Name == "" || p.Open == nil:
		panic("kv: protocol registered without a name or an Open function: " + p.Name)
	case p.Options != nil && reflect.TypeOf(p.Options).Kind() != reflect.Struct:
		panic("kv: protocol " + p.Name + " registered with Options that are not a struct")
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[p.Name]; dup {
		panic("kv: protocol registered twice: " + p.Name)
	}
	registry[p.Name] = p
}

// Lookup returns the descriptor of the protocol registered as name.
func Lookup(name string) (Protocol, bool) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	p, ok := registry[name]
	return p, ok
}

// Protocols returns the registered protocol names, sorted.
func Protocols() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	return slices.Sorted(maps.Keys(registry))
}

// OptionsFingerprint returns a short, stable name for a protocol and its
// options in canonical form (Config.OptionSettings, the defaults left
// out): the first 8 bytes, in hex, of the SHA-256 of the JSON list of the
// protocol name and each setting's name and value, sorted by name. Two
// stores have the same fingerprint exactly when they were made with the
// same protocol and options, so operators can compare deployments at a
// glance (`oblivkv info`, INFO).
func OptionsFingerprint(protocol string, settings map[string]string) string {
	fields := []string{protocol}
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		fields = append(fields, name, settings[name])
	}
	text, _ := json.Marshal(fields) // a []string always marshals
	sum := sha256.Sum256(text)
	return hex.EncodeToString(sum[:8])
}
