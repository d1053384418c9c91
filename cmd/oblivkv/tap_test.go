package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/backend/mem"
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

// TestTapMerge: two processes' logs become one, which tap reads.
func TestTapMerge(t *testing.T) {
	dir := t.TempDir()
	var logs []string
	for i, addr := range []string{"first", "second"} {
		path := filepath.Join(dir, fmt.Sprint(i))
		l, err := observe.CreateFileLog(path)
		if err != nil {
			t.Fatal(err)
		}
		tap := observe.NewTap(mem.New(), l)
		if _, err := tap.Read(context.Background(), []string{addr}); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		logs = append(logs, path)
	}
	merged := filepath.Join(dir, "merged")
	out, err := runRootCmd(t, append([]string{"tap", "merge", "--out", merged}, logs[1], logs[0])...)
	if err != nil || !strings.Contains(out, "merged 2 records of 2 logs") {
		t.Fatalf("tap merge: %v\n%s", err, out)
	}
	out, err = runRootCmd(t, "tap", merged)
	if err != nil {
		t.Fatal(err)
	}
	if first, second := strings.Index(out, `"first"`), strings.Index(out, `"second"`); first < 0 || second < first {
		t.Fatalf("merged log, in time order, printed as:\n%s", out)
	}
	if _, err := runRootCmd(t, "tap", "merge", logs[0]); err == nil {
		t.Fatal("tap merge without --out was accepted")
	}
}
