package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadThenServe bulk-loads CSV and JSONL files into new stores and
// serves what was loaded.
func TestLoadThenServe(t *testing.T) {
	for _, tc := range []struct{ name, file, content string }{
		{"csv", "in.csv", "alice,1\nbob,\"two, quoted\"\nalice,3\n"},
		{"jsonl", "in.jsonl", `{"key":"alice","value":"1"}` + "\n" + `{"key":"bob","value":"two, quoted"}` + "\n" + `{"key":"alice","value":"3"}` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, tc.file), []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := runMain(dir, append([]string{"load", "--data-dir", "data", tc.file}, smallStore...)...)
			if err != nil || !strings.Contains(out, "holds 2 keys") {
				t.Fatalf("load: %v: %s", err, out)
			}
			s := startServe(t, dir)
			got, err := client(t, s.addr).MGet(context.Background(), "alice", "bob").Result()
			if err != nil || got[0] != "3" || got[1] != "two, quoted" {
				t.Fatalf("MGET after load = %v, %v; want [3 two, quoted]", got, err)
			}
			s.stop(t)
		})
	}
}

// TestLoadRejectsBadInputWithoutWriting: a malformed line or an oversized
// value fails the load and leaves the store empty.
func TestLoadRejectsBadInputWithoutWriting(t *testing.T) {
	dir := t.TempDir()
	bad := map[string]string{
		"short.csv": "a,1\nb\n",
		"big.csv":   "a,1\nb," + strings.Repeat("x", 2000) + "\n",
		"bad.jsonl": `{"key":"a","value":"1"}` + "\n" + `{"key":"b"` + "\n",
	}
	for file, content := range bad {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := runMain(dir, "load", "--data-dir", "data", "--capacity", "1024", file); err == nil {
			t.Fatalf("load %s succeeded: %s", file, out)
		}
	}
	s := startServe(t, dir)
	if n, err := client(t, s.addr).DBSize(context.Background()).Result(); err != nil || n != 0 {
		t.Fatalf("DBSIZE after refused loads = %d, %v; want 0", n, err)
	}
	s.stop(t)
}
