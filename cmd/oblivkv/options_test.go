package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/options"
)

// runOptions runs `oblivkv options args...` in process.
func runOptions(args ...string) (string, error) {
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs(append([]string{"options"}, args...))
	err := root.Execute()
	return out.String(), err
}

// TestOptionsCommand: every protocol is listed with its summary, and each
// of its options with type, default and doc; --protocol lists one.
func TestOptionsCommand(t *testing.T) {
	out, err := runOptions()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range kv.Protocols() {
		p, _ := kv.Lookup(name)
		if !strings.Contains(out, name+": "+p.Summary+"\n") {
			t.Errorf("protocol %s's summary missing from %s", name, out)
		}
		for _, o := range options.List(name) {
			if !containsFields(out, o.Name, o.Type, o.Default, o.Doc) {
				t.Errorf("option %s of %s (%+v) missing from %s", o.Name, name, o, out)
			}
		}
	}
	out, err = runOptions("--protocol", "taostore")
	if err != nil || !strings.HasPrefix(out, "taostore: ") || strings.Contains(out, "treebeard") || !containsFields(out, "CachedLevels", "integer", "0") {
		t.Errorf("options --protocol taostore: %v\n%s", err, out)
	}
	if _, err := runOptions("--protocol", "nosuch"); err == nil || !strings.Contains(err.Error(), "unknown protocol") {
		t.Errorf("options --protocol nosuch: %v", err)
	}
}

// containsFields reports whether a line of out holds fields, in order,
// separated by spaces only.
func containsFields(out string, fields ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.TrimSpace(line), true
		for _, f := range fields {
			if rest, ok = strings.CutPrefix(rest, f); !ok {
				break
			}
			rest = strings.TrimLeft(rest, " ")
		}
		if ok {
			return true
		}
	}
	return false
}

// TestOperationsListsOptions: the options table of docs/OPERATIONS.md has
// a row for exactly the options each protocol has, and each row's default
// is the option's `default` tag, maybe followed by more (" (4 MiB)").
func TestOperationsListsOptions(t *testing.T) {
	text, err := os.ReadFile("../../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := optionsTable(t, string(text))
	for _, name := range kv.Protocols() {
		for _, o := range options.List(name) {
			def, ok := documented[name+" "+o.Name]
			delete(documented, name+" "+o.Name)
			switch {
			case !ok:
				t.Errorf("OPERATIONS.md lacks option %s of %s", o.Name, name)
			case def != o.Default && !strings.HasPrefix(def, o.Default+" ") && !strings.HasPrefix(def, o.Default+","):
				t.Errorf("OPERATIONS.md: option %s of %s defaults to %q; its default tag says %s", o.Name, name, def, o.Default)
			}
		}
	}
	for row := range documented {
		t.Errorf("OPERATIONS.md documents option %s, which no protocol has", row)
	}
}

// optionsTable returns the rows of the options table (the one headed
// "| protocol | option | default | meaning |"), "protocol option" to the
// default column, backquotes removed. A row with an empty protocol column
// belongs to the protocol above it.
func optionsTable(t *testing.T, text string) map[string]string {
	_, table, ok := strings.Cut(text, "| protocol | option | default | meaning |\n|---|---|---|---|\n")
	if !ok {
		t.Fatal("OPERATIONS.md has no options table")
	}
	rows := map[string]string{}
	protocol := ""
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 5 {
			break
		}
		clean := func(i int) string { return strings.ReplaceAll(strings.TrimSpace(cells[i]), "`", "") }
		if clean(1) != "" {
			protocol = clean(1)
		}
		if clean(2) != "none" {
			rows[protocol+" "+clean(2)] = clean(3)
		}
	}
	return rows
}
