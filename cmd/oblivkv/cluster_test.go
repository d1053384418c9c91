package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runRootCmd runs `oblivkv args...` and returns what it printed.
func runRootCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestClusterCerts(t *testing.T) {
	dir := t.TempDir()
	config := exampleConfig(t)
	out, err := runRootCmd(t, "cluster", "certs", "--config", config, "--out", dir)
	if err != nil || !strings.Contains(out, "wrote a new CA") || !strings.Contains(out, "wrote 15 certificates, kept 0") {
		t.Fatalf("cluster certs: %v\n%s", err, out)
	}
	for _, f := range []string{"ca.crt", "ca.key", "router-0.crt", "oram-1-c.key"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	out, err = runRootCmd(t, "cluster", "certs", "--config", config, "--out", dir)
	if err != nil || !strings.Contains(out, "signed with the CA in") || !strings.Contains(out, "wrote 0 certificates, kept 15") {
		t.Fatalf("cluster certs again: %v\n%s", err, out)
	}
	if _, err := runRootCmd(t, "cluster", "certs", "--config", config, "--out", dir, "--days", "0"); err == nil || !strings.Contains(err.Error(), "--days") {
		t.Fatalf("--days 0: %v, want a refusal", err)
	}
	if _, err := runRootCmd(t, "cluster", "certs", "--out", dir); err == nil || !strings.Contains(err.Error(), "config") {
		t.Fatalf("no --config: %v, want a refusal", err)
	}
}

// exampleConfig copies cluster/example.yaml into a temporary directory,
// so that what a command writes beside it (the key, under its root) stays
// out of the repository.
func exampleConfig(t *testing.T) string {
	t.Helper()
	example, err := os.ReadFile(filepath.Join(repoRoot, "cluster", "example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), "example.yaml")
	if err := os.WriteFile(config, example, 0o644); err != nil {
		t.Fatal(err)
	}
	return config
}
