package kvtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/options"
)

// CheckDefaultTags holds protocol's Options type T to stating each
// default once, in its `default` tag (see kv.Protocol.Options). It fails t
// where the defaults T.EnsureDefaults applies for a store of
// kv.DefaultCapacity do not pass T.Validate or change when applied again;
// where an option whose tag is a constant defaults to another value; and
// where the doc comment of an option's field speaks of a default other
// than its tag's. So the defaults `oblivkv options` shows, and those setup
// drops from a store's recorded settings, are the protocol's own. It reads
// T's declaration from the Go files of the current directory: call it from
// the test of T's package.
func CheckDefaultTags[T kv.Options[T]](t testing.TB, protocol string) {
	t.Helper()
	var zero T
	resolved := zero.EnsureDefaults(kv.DefaultCapacity)
	if err := resolved.Validate(kv.DefaultCapacity); err != nil {
		t.Errorf("%s: the defaults are not valid: %v", protocol, err)
	}
	if again := resolved.EnsureDefaults(kv.DefaultCapacity); !reflect.DeepEqual(again, resolved) {
		t.Errorf("%s: EnsureDefaults applied twice gives %+v; once, %+v", protocol, again, resolved)
	}
	docs := fieldDocs(t, reflect.TypeFor[T]().Name())
	for _, o := range options.List(protocol) {
		if o.Constant {
			checkConstantDefault(t, protocol, o, reflect.ValueOf(resolved).FieldByName(o.Name))
		}
		for _, said := range statedDefaults(docs[o.Name]) {
			if !startsWith(said, o.Default) && !startsWith(said, "tag") {
				t.Errorf("%s option %s: its doc comment says the default is %q; its default tag says %s (state it once, in the tag)", protocol, o.Name, said, o.Default)
			}
		}
	}
}

// checkConstantDefault fails t unless got, the value option o of protocol
// defaults to, is its tag's constant.
func checkConstantDefault(t testing.TB, protocol string, o options.Option, got reflect.Value) {
	t.Helper()
	tagged, err := options.Parse(protocol, []string{o.Name + "=" + o.Default})
	if err != nil {
		t.Fatal(err)
	}
	if want := reflect.ValueOf(tagged).FieldByName(o.Name); !got.Equal(want) {
		t.Errorf("%s option %s defaults to %v; its default tag says %s", protocol, o.Name, got, o.Default)
	}
}

// defaultWord is the word "default" or "defaults" as a doc comment states
// a default with it ("default 4", "defaults to 4", "the default is 4",
// "default: 4"), with the words that may link it to the value.
var defaultWord = regexp.MustCompile(`(?i)\bdefaults?\b\s*(?:(?:to|is)\b\s*|:\s*)?`)

// startsWith reports whether text begins with the value or word v, whole.
func startsWith(text, v string) bool {
	rest, ok := strings.CutPrefix(text, v)
	return ok && !continues.MatchString(rest)
}

// continues matches text that would continue a value or a word before it.
var continues = regexp.MustCompile(`^(\w|\.\d)`)

// statedDefaults returns what follows each mention of a default in doc,
// spaces folded: the default it states, or "tag..." where it refers to the
// field's default tag.
func statedDefaults(doc string) []string {
	doc = strings.Join(strings.Fields(doc), " ")
	var said []string
	for _, m := range defaultWord.FindAllStringIndex(doc, -1) {
		said = append(said, doc[m[1]:])
	}
	return said
}

// fieldDocs returns the doc comments of the fields of the struct type
// named typ, declared in the Go files (tests aside) of the current
// directory, by field name.
func fieldDocs(t testing.TB, typ string) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			spec, ok := n.(*ast.TypeSpec)
			if !ok || spec.Name.Name != typ {
				return true
			}
			if st, ok := spec.Type.(*ast.StructType); ok {
				for _, field := range st.Fields.List {
					for _, id := range field.Names {
						docs[id.Name] = field.Doc.Text() + field.Comment.Text()
					}
				}
			}
			return false
		})
	}
	if len(docs) == 0 {
		t.Fatalf("no struct type %s declared in this directory", typ)
	}
	return docs
}
