package random

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Two fresh seeds differ; one seed always begins the same generator, and
// its labels and draws begin others.
func TestSeeds(t *testing.T) {
	a, err := Fresh()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Fresh()
	if a == b || a == (Seed{}) {
		t.Fatalf("two fresh seeds: %x and %x", a, b)
	}
	if New(a).Uint64() != New(a).Uint64() {
		t.Fatal("one seed began two different generators")
	}
	first := New(a).Uint64()
	for _, other := range []uint64{New(b).Uint64(), Labeled(a, "x").Uint64(), Labeled(a, "y").Uint64(), New(Draw(New(a))).Uint64()} {
		if other == first {
			t.Fatalf("a derived generator repeats its parent's first draw %x", first)
		}
	}
	if r, _ := Root((*[32]byte)(&a)); r != a {
		t.Fatal("Root of a test seed is not that seed")
	}
	if r, _ := Root(nil); r == a || r == b || r == (Seed{}) {
		t.Fatalf("Root without a test seed returned %x, not a fresh one", r)
	}
	if Labeled(a, "x").Uint64() != Labeled(a, "x").Uint64() {
		t.Fatal("one label of one seed began two different generators")
	}
}

// TestProtocolsDrawOnlyFromFresh holds every protocol to this package: no
// file of protocol/ outside tests reads crypto/rand, imports math/rand, or
// builds a math/rand/v2 generator itself (NewChaCha8, NewPCG, a ChaCha8 or
// PCG value rather than a pointer to one), so every generator a store uses begins at a seed from Fresh
// (or from a protocol's test-only seed option). A protocol that seeded a
// generator with a constant, or read crypto/rand on its own, fails here.
func TestProtocolsDrawOnlyFromFresh(t *testing.T) {
	root := filepath.Join("..", "protocol")
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		files++
		for _, v := range violations(t, path) {
			t.Errorf("%s: %s", path, v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("found %d files under %s; the walk missed the protocols", files, root)
	}
}

// violations lists what file does that TestProtocolsDrawOnlyFromFresh
// forbids.
func violations(t *testing.T, path string) []string {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	randName := ""
	var out []string
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		switch p {
		case "crypto/rand", "math/rand":
			out = append(out, "imports "+p)
		case "math/rand/v2":
			randName = "rand"
			if imp.Name != nil {
				randName = imp.Name.Name
			}
		}
	}
	if randName == "" {
		return out
	}
	pointed := map[ast.Node]bool{} // *rand.ChaCha8 names a generator, it builds none
	ast.Inspect(f, func(n ast.Node) bool {
		if star, ok := n.(*ast.StarExpr); ok {
			pointed[star.X] = true
		}
		sel, ok := n.(*ast.SelectorExpr)
		if !ok || pointed[sel] {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); ok && x.Name == randName {
			switch sel.Sel.Name {
			case "NewChaCha8", "NewPCG", "ChaCha8", "PCG":
				out = append(out, "builds a generator with math/rand/v2's "+sel.Sel.Name+" (begin generators with package random)")
			}
		}
		return true
	})
	return out
}
