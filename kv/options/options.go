// Package options reads and writes a protocol's options as named
// settings: --opt NAME=VALUE arguments turned into the protocol's Options
// value by reflection over the zero Options its kv.Protocol descriptor
// holds (Parse, ParseEach), their canonical form a store records (Settings:
// an option at its constant default left out, and Args back), and their
// listing with types, defaults and docs (List, for `oblivkv options`).
//
// An option is an exported int, float64 or time.Duration field of Options
// itself; an Options' TestingKnobs (the hooks of tests) is none, so
// nothing here sets, lists or records it.
//
// It owns the rules of a setting's name and value. It must never import a
// protocol package: the descriptor is its only view of one.
package options

import (
	"errors"
	"fmt"
	"iter"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oblivkv/oblivkv/kv"
)

// optionsOf returns the zero value of protocol's Options, as its kv
// descriptor holds it, and whether the protocol takes options.
func optionsOf(protocol string) (any, bool) {
	p, ok := kv.Lookup(protocol)
	return p.Options, ok && p.Options != nil
}

var durationType = reflect.TypeFor[time.Duration]()

// Names returns the names of the options Parse accepts for
// protocol: the exported int, float64 and time.Duration fields of its
// Options, in declaration order (nil for a protocol without options).
func Names(protocol string) []string {
	var names []string
	for _, o := range List(protocol) {
		names = append(names, o.Name)
	}
	return names
}

// settable reports whether an Options field can be set by name: exported,
// and an int, a float64 or a time.Duration.
func settable(f reflect.StructField) bool {
	k := f.Type.Kind()
	return f.IsExported() && (f.Type == durationType || k == reflect.Int || k == reflect.Float64)
}

// Parse builds protocol's Options value from "name=value"
// settings, for kv.Config.Options. Names are its Options' exported fields,
// matched ignoring case, '-' and '_' (cachedlevels, cached-levels and
// CachedLevels are one field); int fields take decimal integers, float64
// fields decimal numbers, time.Duration fields Go durations ("1ms", "-1s"). Fields not set stay
// zero, which every protocol reads as its default. With no settings it
// returns nil (the protocol's defaults). A protocol without options
// rejects every setting.
func Parse(protocol string, opts []string) (any, error) {
	if len(opts) == 0 {
		return nil, nil
	}
	zero, ok := optionsOf(protocol)
	if !ok {
		if !slices.Contains(kv.Protocols(), protocol) {
			return nil, fmt.Errorf("%w %q (known: %v)", kv.ErrUnknownProtocol, protocol, kv.Protocols())
		}
		return nil, fmt.Errorf("protocol %s takes no options (got %q)", protocol, opts[0])
	}
	v := reflect.New(reflect.TypeOf(zero)).Elem()
	for _, opt := range opts {
		name, value, err := splitOption(opt)
		if err != nil {
			return nil, err
		}
		f, ok := field(v, name)
		if !ok {
			return nil, fmt.Errorf("%s has no option %q (its options: %s)", protocol, name, strings.Join(Names(protocol), ", "))
		}
		if err := set(f, value); err != nil {
			return nil, fmt.Errorf("%s option %s=%q: %w", protocol, name, value, err)
		}
	}
	return v.Interface(), nil
}

// ParseEach builds the Options of each of protocols from the
// same settings, as Parse does, except that a setting goes only
// to the protocols that have such an option; a setting no protocol has is
// an error. Protocols given no setting are absent from the result.
func ParseEach(protocols []string, opts []string) (map[string]any, error) {
	mine := map[string][]string{}
	for _, opt := range opts {
		name, _, err := splitOption(opt)
		if err != nil {
			return nil, err
		}
		var takers []string
		for _, p := range protocols {
			if _, ok := FieldName(p, name); ok {
				takers = append(takers, p)
				mine[p] = append(mine[p], opt)
			}
		}
		if len(takers) == 0 {
			if len(protocols) == 1 { // Parse says why
				_, err := Parse(protocols[0], []string{opt})
				return nil, err
			}
			return nil, noTaker(protocols, name)
		}
	}
	out := map[string]any{}
	for _, p := range protocols {
		if o, ok := mine[p]; ok {
			v, err := Parse(p, o)
			if err != nil {
				return nil, err
			}
			out[p] = v
		}
	}
	return out, nil
}

func noTaker(protocols []string, name string) error {
	var valid []string
	for _, p := range protocols {
		names := "none"
		if n := Names(p); len(n) > 0 {
			names = strings.Join(n, ", ")
		}
		valid = append(valid, p+": "+names)
	}
	return fmt.Errorf("no protocol of the run has an option %q (options of %s)", name, strings.Join(valid, "; "))
}

func splitOption(opt string) (name, value string, err error) {
	name, value, ok := strings.Cut(opt, "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" {
		return "", "", fmt.Errorf("option %q: want NAME=VALUE", opt)
	}
	return name, strings.TrimSpace(value), nil
}

func normalise(name string) string {
	return strings.ToLower(strings.NewReplacer("-", "", "_", "").Replace(name))
}

// field finds the settable field of v called name.
func field(v reflect.Value, name string) (reflect.Value, bool) {
	t := v.Type()
	for i := range t.NumField() {
		if f := t.Field(i); settable(f) && normalise(f.Name) == normalise(name) {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

func set(f reflect.Value, value string) error {
	if f.Type() == durationType {
		d, err := time.ParseDuration(value)
		if err != nil {
			return errors.New("want a duration such as 500us, 1ms or 2s")
		}
		f.SetInt(int64(d))
		return nil
	}
	if f.Kind() == reflect.Float64 {
		x, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return errors.New("want a number such as 0.8")
		}
		f.SetFloat(x)
		return nil
	}
	n, err := strconv.ParseInt(value, 10, 64)
	if err != nil || f.OverflowInt(n) {
		return errors.New("want an integer")
	}
	f.SetInt(n)
	return nil
}

// Format writes the settable fields of an Options value that are
// not at their defaults (see Settings) as "Name=value" settings
// Parse reads back.
func Format(options any) string {
	v, ok := optionsStruct(options)
	if !ok {
		return fmt.Sprint(options)
	}
	var parts []string
	for name, value := range settings(v) {
		parts = append(parts, name+"="+value)
	}
	return strings.Join(parts, " ")
}

// Settings returns the settable fields of an Options value (a value or a
// pointer; nil: none) that are not at their defaults, as a map of field
// name to value in the form Parse reads back: the canonical,
// protocol-independent form of options that kv records with a store
// (kv.Config.OptionSettings). A field is at its default when it is zero,
// or when it holds the constant its `default` tag names (Epoch=1ms for
// treebeard's Epoch `default:"1ms"`); a default that depends on the store
// ("ceil(sqrt(N))") is never assumed. So an option given explicitly at its
// default is the same store as one left out. It is never nil, so a store
// created with every default records that.
func Settings(options any) map[string]string {
	out := map[string]string{}
	if v, ok := optionsStruct(options); ok {
		maps.Insert(out, settings(v))
	}
	return out
}

// optionsStruct returns the struct an Options value, or a pointer to one,
// holds, and whether it holds one.
func optionsStruct(options any) (reflect.Value, bool) {
	v := reflect.ValueOf(options)
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	return v, v.Kind() == reflect.Struct
}

// Args turns Settings back into "Name=value" settings, sorted by
// name, for Parse.
func Args(settings map[string]string) []string {
	args := make([]string, 0, len(settings))
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		args = append(args, name+"="+settings[name])
	}
	return args
}

// settings yields the settable fields of the struct v not at their
// defaults (see Settings), in declaration order, with their values
// formatted as set reads them.
func settings(v reflect.Value) iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !settable(f) || v.Field(i).IsZero() {
				continue
			}
			value := format(v.Field(i))
			if d, ok := constantDefault(f); ok && d == value {
				continue
			}
			if !yield(f.Name, value) {
				return
			}
		}
	}
}

// format writes the value of a settable field as set reads it.
func format(v reflect.Value) string {
	switch {
	case v.Type() == durationType:
		return time.Duration(v.Int()).String()
	case v.Kind() == reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	}
	return strconv.FormatInt(v.Int(), 10)
}

// constantDefault returns the default of field f in canonical form (as
// format writes it), when its `default` tag is a value set reads rather
// than a description.
func constantDefault(f reflect.StructField) (string, bool) {
	v := reflect.New(f.Type).Elem()
	if err := set(v, f.Tag.Get("default")); err != nil {
		return "", false
	}
	return format(v), true
}

// Option describes one option of a protocol, for listings.
type Option struct {
	Name string // the Options field, e.g. "Trees"
	Type string // "integer", "number" or "duration"
	// Default is the field's `default` tag: a value, or a description of
	// a default that depends on the store, such as "ceil(sqrt(N))".
	Default string
	// Constant reports that Default is a value (see Settings).
	Constant bool
	Doc      string // the field's `opt` tag: what the option does
}

// List returns the options Parse accepts for protocol, in
// declaration order, with their types, defaults and docs (nil for a
// protocol without options).
func List(protocol string) []Option {
	zero, ok := optionsOf(protocol)
	if !ok {
		return nil
	}
	var list []Option
	t := reflect.TypeOf(zero)
	for i := range t.NumField() {
		f := t.Field(i)
		if !settable(f) {
			continue
		}
		_, constant := constantDefault(f)
		list = append(list, Option{Name: f.Name, Type: typeName(f.Type), Default: f.Tag.Get("default"),
			Constant: constant, Doc: f.Tag.Get("opt")})
	}
	return list
}

// typeName names the values an option of type t takes.
func typeName(t reflect.Type) string {
	switch {
	case t == durationType:
		return "duration"
	case t.Kind() == reflect.Float64:
		return "number"
	}
	return "integer"
}

// FieldName returns the field name of protocol's option name (matched as
// Parse matches it), and whether it has one.
func FieldName(protocol, name string) (string, bool) {
	for _, n := range Names(protocol) {
		if normalise(n) == normalise(name) {
			return n, true
		}
	}
	return "", false
}
