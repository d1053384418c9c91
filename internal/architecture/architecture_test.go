package architecture

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/oblivkv/oblivkv/"

// layers in order, lowest first; "test" is test support, beside them.
var layers = []string{"base", "durability", "api", "protocol", "service", "command"}

// pkg is what `go list -json` says of one package.
type pkg struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
	Deps         []string
}

// listed returns every package of the module, with its dependencies.
func listed(t *testing.T, args ...string) []pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-json=ImportPath,Imports,TestImports,XTestImports,Deps"}, args...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	for d := json.NewDecoder(strings.NewReader(string(out))); d.More(); {
		var p pkg
		if err := d.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// table reads the package table of docs/ARCHITECTURE.md: package to layer.
func table(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open("../../docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := map[string]string{}
	for sc := bufio.NewScanner(f); sc.Scan(); {
		cells := strings.Split(sc.Text(), "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		layer := strings.TrimSpace(cells[2])
		if layer != "test" && !slices.Contains(layers, layer) {
			t.Errorf("ARCHITECTURE.md: package %s has layer %q; want one of %v or test", name, layer, layers)
		}
		if _, dup := rows[name]; dup {
			t.Errorf("ARCHITECTURE.md lists %s twice", name)
		}
		rows[name] = layer
	}
	return rows
}

func local(path string) (string, bool) {
	if !strings.HasPrefix(path, module) {
		return "", false
	}
	return strings.TrimPrefix(path, module), true
}

// TestTableListsEveryPackage: the table and `go list` name the same
// packages.
func TestTableListsEveryPackage(t *testing.T) {
	rows := table(t)
	seen := map[string]bool{}
	for _, p := range listed(t, "./...") {
		name, _ := local(p.ImportPath)
		seen[name] = true
		if _, ok := rows[name]; !ok {
			t.Errorf("package %s is missing from docs/ARCHITECTURE.md's package table", name)
		}
	}
	for name := range rows {
		if !seen[name] {
			t.Errorf("docs/ARCHITECTURE.md lists %s, which is not a package of the module", name)
		}
	}
}

// TestImportsRunDown: no package imports one of a higher layer, and only
// tests and test support import test support.
func TestImportsRunDown(t *testing.T) {
	rows := table(t)
	for _, p := range listed(t, "./...") {
		from, _ := local(p.ImportPath)
		for _, imp := range p.Imports {
			if to, ok := local(imp); ok {
				if err := allowed(rows, from, to, false); err != "" {
					t.Errorf("%s imports %s: %s", from, to, err)
				}
			}
		}
		for _, imp := range slices.Concat(p.TestImports, p.XTestImports) {
			if to, ok := local(imp); ok && to != from {
				if err := allowed(rows, from, to, true); err != "" {
					t.Errorf("%s's tests import %s: %s", from, to, err)
				}
			}
		}
	}
}

// allowed says why from may not import to, or "" if it may. A test may
// import any layer's package; what it imports must still not be above
// the layer of the package under test, unless it is command or test
// support.
func allowed(rows map[string]string, from, to string, test bool) string {
	lf, lt := rows[from], rows[to]
	switch {
	case lf == "" || lt == "":
		return "" // reported by TestTableListsEveryPackage
	case lt == "test" && lf != "test" && !test:
		return "test support imported by code that is not a test"
	case lf == "test" && lt != "test" && rank(lt) > rank("api"):
		return "test support imports the " + lt + " layer"
	case lf != "test" && lt != "test" && rank(lt) > rank(lf) && !test:
		return "the " + lt + " layer is above " + from + "'s " + lf
	}
	return ""
}

func rank(layer string) int { return slices.Index(layers, layer) }

// TestKVHasNoStorageEngine: the API carries a journal through an
// interface; only the command chooses pebble.
func TestKVHasNoStorageEngine(t *testing.T) {
	for _, p := range listed(t, "-deps=false", "./kv", "./kv/options", "./internal/durable") {
		for _, d := range listed(t, "-deps", p.ImportPath) {
			if d.ImportPath == "github.com/cockroachdb/pebble" {
				t.Errorf("%s depends on pebble", p.ImportPath)
			}
		}
	}
}
