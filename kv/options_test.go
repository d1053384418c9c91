package kv

import (
	"strings"
	"testing"
)

type sampleOptions struct{ A int }

// A value, a pointer, nil and a nil pointer are accepted; any other type
// is an error naming both types.
func TestOptionsOf(t *testing.T) {
	for _, v := range []any{sampleOptions{A: 3}, &sampleOptions{A: 3}} {
		if o, err := OptionsOf[sampleOptions]("p", v); err != nil || o.A != 3 {
			t.Errorf("OptionsOf(%T) = %+v, %v; want A=3", v, o, err)
		}
	}
	for _, v := range []any{nil, (*sampleOptions)(nil)} {
		if o, err := OptionsOf[sampleOptions]("p", v); err != nil || o.A != 0 {
			t.Errorf("OptionsOf(%#v) = %+v, %v; want the zero options", v, o, err)
		}
	}
	if _, err := OptionsOf[sampleOptions]("p", struct{ A int }{}); err == nil || !strings.Contains(err.Error(), "kv.sampleOptions") {
		t.Errorf("OptionsOf(another type) = %v; want an error naming kv.sampleOptions", err)
	}
}
