package kv

import (
	"errors"
	"strings"
	"testing"
)

// shapedOptions has kv.Options' shape: A defaults to the capacity, and
// must not exceed it.
type shapedOptions struct{ A int }

func (o shapedOptions) EnsureDefaults(n int) shapedOptions {
	if o.A == 0 {
		o.A = n
	}
	return o
}

func (o shapedOptions) Validate(n int) error {
	if o.A > n {
		return errors.New("A exceeds the capacity")
	}
	return nil
}

// TestResolveOptions: the options given, defaults applied for the
// capacity, then validated; options of another type are an error.
func TestResolveOptions(t *testing.T) {
	for _, tc := range []struct {
		options any
		want    int
		err     string
	}{
		{nil, 8, ""},
		{shapedOptions{A: 3}, 3, ""},
		{&shapedOptions{A: 5}, 5, ""},
		{shapedOptions{A: 9}, 0, "exceeds"},
		{"A=3", 0, "want kv.shapedOptions"},
	} {
		o, err := ResolveOptions[shapedOptions]("p", Env{Capacity: 8, Options: tc.options})
		switch {
		case tc.err == "" && (err != nil || o.A != tc.want):
			t.Errorf("ResolveOptions(%#v) = %+v, %v; want A=%d", tc.options, o, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ResolveOptions(%#v): error %v; want one with %q", tc.options, err, tc.err)
		}
	}
}
