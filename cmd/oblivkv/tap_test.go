package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/observe"
)

// TestTapPrintsFence: a fenced write's line names its fence and token; a
// plain write's line names none.
func TestTapPrintsFence(t *testing.T) {
	var out bytes.Buffer
	records := []observe.Record{
		{Seq: 1, Op: observe.OpWrite, Addrs: []string{"a"}, Sizes: []int{3}, Fence: "fence/t", Token: 1<<44 | 9},
		{Seq: 2, Op: observe.OpWrite, Addrs: []string{"b"}, Sizes: []int{3}},
	}
	if err := printRecords(&out, records, 0); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[1], `"fence/t" token 17592186044425`) || strings.Contains(lines[2], "token") {
		t.Fatalf("tap printed:\n%s", out.String())
	}
}
