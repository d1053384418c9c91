package kv

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Every statistic is declared once in stats.go: a distinct snake_case
// name, with a comment saying what it reports.
func TestStatNamesDeclaredOnce(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "stats.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	snake, seen := regexp.MustCompile(`^[a-z][a-z0-9_]*$`), map[string]string{}
	for _, decl := range f.Decls {
		for _, spec := range decl.(*ast.GenDecl).Specs {
			v := spec.(*ast.ValueSpec)
			name, value := v.Names[0].Name, v.Values[0].(*ast.BasicLit).Value
			value, _ = strconv.Unquote(value)
			switch {
			case !strings.HasPrefix(name, "Stat"):
				t.Errorf("%s is not named Stat...", name)
			case !snake.MatchString(value):
				t.Errorf("%s = %q is not snake_case", name, value)
			case v.Comment == nil && v.Doc == nil:
				t.Errorf("%s has no comment saying what it reports", name)
			case seen[value] != "":
				t.Errorf("%s and %s are both %q", seen[value], name, value)
			}
			seen[value] = name
		}
	}
	if len(seen) == 0 {
		t.Fatal("stats.go declares no statistic")
	}
}

// No code outside stats.go names a statistic with a string of its own:
// a Stat literal's Name is one of stats.go's constants (or a variable),
// so names cannot drift apart again.
func TestStatsNamedByConstants(t *testing.T) {
	fset := token.NewFileSet()
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && path != ".." && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || path == "stats.go":
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, lit := range statLiterals(f) {
			if name := literalName(lit); name != "" {
				t.Errorf("%s: a Stat named %s; use its constant from kv/stats.go (declare it there if new)", fset.Position(lit.Pos()), name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// statLiterals returns f's Stat literals: those of type kv.Stat, and the
// elements of a []kv.Stat literal, whose type is left out.
func statLiterals(f *ast.File) []*ast.CompositeLit {
	var lits []*ast.CompositeLit
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		if isStatType(lit.Type) {
			lits = append(lits, lit)
		}
		if a, ok := lit.Type.(*ast.ArrayType); ok && isStatType(a.Elt) {
			for _, el := range lit.Elts {
				if e, ok := el.(*ast.CompositeLit); ok && e.Type == nil {
					lits = append(lits, e)
				}
			}
		}
		return true
	})
	return lits
}

// isStatType reports whether a composite literal's type is kv.Stat.
func isStatType(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name == "Stat"
	case *ast.SelectorExpr:
		x, ok := e.X.(*ast.Ident)
		return ok && x.Name == "kv" && e.Sel.Name == "Stat"
	}
	return false
}

// literalName returns the string literal a Stat literal's Name is, if it
// is one (quoted), or "".
func literalName(lit *ast.CompositeLit) string {
	for _, el := range lit.Elts {
		if kv, ok := el.(*ast.KeyValueExpr); ok {
			if key, ok := kv.Key.(*ast.Ident); ok && key.Name == "Name" {
				if s, ok := kv.Value.(*ast.BasicLit); ok {
					return s.Value
				}
			}
		}
	}
	return ""
}
