package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/setup"
	"github.com/oblivkv/oblivkv/internal/testsupport/redistest"
	"github.com/oblivkv/oblivkv/kv/kvtest/fixture"
)

// protocols are the eight protocols, all of which name their keys
// (kv.KeyLister), so a dump can read each.
var protocols = []string{"treebeard", "taostore", "pathoram", "plain", "encrypted", "waffle", "cloak", "oblivistore"}

// movedStore is the size of the stores the dump tests move.
var movedStore = []string{"--capacity", "256", "--value-size", "64"}

// fillStore creates a store of protocol in dataDir on storage spec and
// fills it with random binary keys and values: some keys deleted, one
// overwritten, one value empty. It returns what the store holds.
func fillStore(t *testing.T, dataDir, spec, protocol string, seed uint64) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	opened, err := setup.Open(ctx, setup.Options{Protocol: protocol, Backend: spec, DataDir: dataDir, Capacity: 256, ValueSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	bytesOf := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	want := map[string][]byte{"\r\n": []byte("text, \"quoted\"\r\n"), "empty": {}}
	for len(want) < 120 {
		want[string(bytesOf(1+rng.IntN(24)))] = bytesOf(rng.IntN(65))
	}
	for key, val := range want {
		if err := opened.Store.Put(ctx, key, val); err != nil {
			t.Fatal(err)
		}
	}
	deleted := 0
	for key := range want {
		if deleted == 20 {
			break
		}
		if key != "empty" {
			if err := opened.Store.Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
			delete(want, key)
			deleted++
		}
	}
	want["empty"] = []byte("overwritten")
	if err := opened.Store.Put(ctx, "empty", want["empty"]); err != nil {
		t.Fatal(err)
	}
	if err := opened.Store.Put(ctx, "\r\n", nil); err != nil {
		t.Fatal(err)
	}
	want["\r\n"] = nil
	if err := opened.Close(); err != nil {
		t.Fatal(err)
	}
	return want
}

// checkStore opens the store in dataDir on storage spec and checks that it
// holds exactly want.
func checkStore(t *testing.T, dataDir, spec string, want map[string][]byte) {
	t.Helper()
	ctx := context.Background()
	opened, err := setup.Open(ctx, setup.Options{Backend: spec, DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	defer opened.Close()
	if n := opened.Store.Stats().Keys; n != int64(len(want)) {
		t.Errorf("the store holds %d keys, want %d", n, len(want))
	}
	for key, val := range want {
		got, ok, err := opened.Store.Get(ctx, key)
		if err != nil || !ok || !bytes.Equal(got, val) {
			t.Fatalf("Get(%q) = %q, %v, %v; want %q", key, got, ok, err, val)
		}
	}
}

// TestDumpLoadAcrossProtocols moves a store of each of the eight
// protocols into the next one of the list (the last into the first), so
// that each is a source once and a target once, through CSV and JSONL
// files, and reads back every key and value, binary ones included. One
// source and one target are on Redis, the others on disk.
func TestDumpLoadAcrossProtocols(t *testing.T) {
	redisURL := redistest.Start(t)
	for i, source := range protocols {
		target := protocols[(i+1)%len(protocols)]
		t.Run(source+"_to_"+target, func(t *testing.T) {
			dir := t.TempDir()
			from, to := "disk", "disk"
			switch i {
			case 1:
				from = strings.TrimSuffix(redisURL, "/0") + "/1"
			case 2:
				to = strings.TrimSuffix(redisURL, "/0") + "/2"
			}
			file := filepath.Join(dir, "dump."+[]string{"csv", "jsonl"}[i%2])
			want := fillStore(t, filepath.Join(dir, "from"), from, source, uint64(i))
			out, err := runMain(dir, "dump", "--data-dir", "from", "--backend", from, "--to", file)
			if err != nil || !strings.Contains(out, fmt.Sprintf("dumped %d keys", len(want))) {
				t.Fatalf("dump: %v: %s", err, out)
			}
			args := append([]string{"load", "--data-dir", "to", "--backend", to, "--protocol", target, file}, movedStore...)
			if out, err := runMain(dir, args...); err != nil || !strings.Contains(out, fmt.Sprintf("holds %d keys", len(want))) {
				t.Fatalf("load: %v: %s", err, out)
			}
			checkStore(t, filepath.Join(dir, "to"), to, want)
			checkStore(t, filepath.Join(dir, "from"), from, want)
		})
	}
}

// TestDumpToStandardOutput: without --to the records go to standard
// output as JSONL, and the count to standard error.
func TestDumpToStandardOutput(t *testing.T) {
	dir := t.TempDir()
	want := fillStore(t, filepath.Join(dir, "data"), "disk", "waffle", 7)
	cmd := mainCmd(dir, "dump", "--data-dir", "data")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("dump: %v: %s", err, stderr.String())
	}
	if lines := strings.Count(stdout.String(), "\n"); lines != len(want) {
		t.Errorf("standard output holds %d lines, want %d", lines, len(want))
	}
	if !strings.Contains(stderr.String(), fmt.Sprintf("dumped %d keys (protocol waffle) to standard output", len(want))) {
		t.Errorf("standard error %q does not count the keys", stderr.String())
	}
}

// TestDumpOfServedStoreIsRefused: a store being served is locked (on
// disk, the embedded store's directory; on Redis, the journal), and a dump
// says to stop its server and writes nothing.
func TestDumpOfServedStoreIsRefused(t *testing.T) {
	for _, spec := range []string{"disk", redistest.Start(t)} {
		dir := t.TempDir()
		s := startServe(t, dir, append([]string{"--protocol", "waffle", "--backend", spec}, movedStore...)...)
		if !waitServing(s) {
			t.Fatalf("serve did not start: %s", s.stderr)
		}
		out, err := runMain(dir, "dump", "--data-dir", "data", "--backend", spec, "--to", "out.jsonl")
		if err == nil || !strings.Contains(out, "stop its server") {
			t.Fatalf("dump of a store served on %s: %v: %s", spec, err, out)
		}
		if _, err := os.Stat(filepath.Join(dir, "out.jsonl")); !os.IsNotExist(err) {
			t.Errorf("a refused dump left out.jsonl: %v", err)
		}
		s.stop(t)
	}
}

// TestFailedDumpLeavesNothing: a dump that cannot write its file (a
// missing directory, or a directory in the file's place), and a dump of a
// protocol that cannot name its keys (the test fixture), leave no file
// and no temporary behind, and the store dumps whole afterwards.
func TestFailedDumpLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	want := fillStore(t, filepath.Join(dir, "data"), "disk", "cloak", 3)
	if err := os.Mkdir(filepath.Join(dir, "taken.csv"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{"missing/out.csv", "taken.csv"} {
		if out, err := runMain(dir, "dump", "--data-dir", "data", "--to", to); err == nil {
			t.Fatalf("dump to %s succeeded: %s", to, out)
		}
	}
	fillStore(t, filepath.Join(dir, "unnamed"), "disk", fixture.Name, 4)
	if out, err := runMain(dir, "dump", "--data-dir", "unnamed", "--to", "unnamed.csv"); err == nil || !strings.Contains(out, "cannot name") {
		t.Fatalf("dump of the fixture: %v: %s", err, out)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "data taken.csv unnamed" {
		t.Errorf("after failed dumps the directory holds %v, want data taken.csv unnamed", names)
	}
	if out, err := runMain(dir, "dump", "--data-dir", "data", "--to", "out.csv"); err != nil || !strings.Contains(out, fmt.Sprintf("dumped %d keys", len(want))) {
		t.Fatalf("dump after failed ones: %v: %s", err, out)
	}
}
