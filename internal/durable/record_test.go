package durable

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
)

// A record's delta and operations come back as they went in, and
// truncated or padded records are refused.
func TestRecordFormat(t *testing.T) {
	ops := []Op{
		{Items: []backend.Item{{Addr: "a", Value: []byte("1")}, {Addr: "b", Value: nil}}},
		{Addrs: []string{"d", "e"}},
	}
	b := encode([]byte("delta"), ops)
	delta, got, err := decode(b)
	if err != nil || string(delta) != "delta" || fmt.Sprint(got) != fmt.Sprint(ops) {
		t.Fatalf("decode = %q, %v, %v; want %q, %v", delta, got, err, "delta", ops)
	}
	for _, bad := range [][]byte{b[:len(b)-1], append(bytes.Clone(b), 0), {}} {
		if _, _, err := decode(bad); err == nil {
			t.Errorf("decode of %d malformed bytes succeeded", len(bad))
		}
	}
}
