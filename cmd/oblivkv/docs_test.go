package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/kv"
)

// repoRoot is the module's root, from this package's directory.
const repoRoot = "../.."

// testNameInDoc is a test or fuzz target's name as the docs cite it (a
// subtest's path after it, "TestX/case", is not checked).
var testNameInDoc = regexp.MustCompile(`\b(?:Test|Fuzz)[A-Z][A-Za-z0-9_]*`)

// testFuncDecl is the declaration of a test or fuzz target.
var testFuncDecl = regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)[A-Z][A-Za-z0-9_]*)\(`)

// TestDocsNameExistingTests: every test the README and docs/*.md name is
// declared in some _test.go file of the module (whatever its build tags),
// so a renamed or removed test cannot leave a document pointing at
// nothing.
func TestDocsNameExistingTests(t *testing.T) {
	declared := testFuncs(t)
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs (%v)", err)
	}
	for _, doc := range append(docs, filepath.Join(repoRoot, "README.md")) {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range testNameInDoc.FindAllString(string(text), -1) {
			if _, ok := declared[name]; !ok {
				t.Errorf("%s names %s, which no _test.go file declares", filepath.Base(doc), name)
			}
		}
	}
}

// TestEveryProtocolHasObliviousAudit holds docs/testing.md's promise that
// every oblivious protocol has a TestObliviousAudit: each registered
// protocol with a package of its own (the baselines share
// protocol/baseline) declares one there.
func TestEveryProtocolHasObliviousAudit(t *testing.T) {
	declared := testFuncs(t)["TestObliviousAudit"]
	checked := 0
	for _, name := range kv.Protocols() {
		dir := filepath.Join(repoRoot, "protocol", name)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		checked++
		if !slices.Contains(declared, dir) {
			t.Errorf("protocol %s has no TestObliviousAudit in %s", name, dir)
		}
	}
	if checked < 6 {
		t.Errorf("checked %d protocol packages; want the six oblivious protocols'", checked)
	}
}

// testFuncs returns the tests and fuzz targets the module's _test.go
// files declare, each with the directories that declare it.
func testFuncs(t *testing.T) map[string][]string {
	t.Helper()
	funcs := map[string][]string{}
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != repoRoot:
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, "_test.go"):
			return nil
		}
		src, err := os.ReadFile(path)
		for _, m := range testFuncDecl.FindAllStringSubmatch(string(src), -1) {
			funcs[m[1]] = append(funcs[m[1]], filepath.Dir(path))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return funcs
}
