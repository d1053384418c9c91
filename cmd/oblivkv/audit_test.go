package main

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/internal/auditrun"
)

// leakyBinary builds oblivkv with the oblivkv_leaks tag, in which the
// OBLIVKV_LEAK variable injects one of a protocol's leaks
// (internal/leakenv).
func leakyBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "oblivkv-leaks")
	out, err := exec.Command("go", "build", "-tags", "oblivkv_leaks", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -tags oblivkv_leaks: %v\n%s", err, out)
	}
	return bin
}

// runAudit runs `bin audit --protocol p --json ... --report ...` with
// OBLIVKV_LEAK=leak (none when empty) and returns its JSON, its report
// directory and whether it exited 0.
func runAudit(t *testing.T, bin, p, leak string) (auditrun.JSONResult, string, bool) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(bin, "audit", "--protocol", p, "--json", filepath.Join(dir, "audit.json"), "--report", filepath.Join(dir, "report"))
	cmd.Env = append(os.Environ(), "OBLIVKV_LEAK="+leak)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	t.Logf("%s with leak %q:\n%s", p, leak, lastLines(string(out), 4))
	raw, rerr := os.ReadFile(filepath.Join(dir, "audit.json"))
	if rerr != nil {
		t.Fatalf("%v (output: %s)", rerr, out)
	}
	var res auditrun.JSONResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	if res.Pass != (err == nil) {
		t.Fatalf("JSON pass %v, exit status %v", res.Pass, err)
	}
	return res, filepath.Join(dir, "report"), err == nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestAuditReportsInjectedLeaks runs `oblivkv audit` built with the leak
// hook: without a leak treebeard and pathoram pass every check (exit 0);
// with one of their injected leaks (the cases of their
// TestAuditsCatchLeaks) the JSON names the check that fails, decisively,
// and the command exits 1. The clean runs' reports render
// (checkReport).
func TestAuditReportsInjectedLeaks(t *testing.T) {
	bin := leakyBinary(t)
	for _, tc := range []struct{ protocol, leak, check string }{
		{"treebeard", "treebeard/evict_on_real_reads", "hotkey: k paths evicted per A path reads"},
		{"pathoram", "pathoram/get_keeps_leaf", "hotkey: consecutive reads of one path"},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			clean, report, ok := runAudit(t, bin, tc.protocol, "")
			if !ok || clean.Protocol != tc.protocol || len(clean.Checks) == 0 {
				t.Fatalf("the clean audit: pass %v, protocol %q, %d checks", ok, clean.Protocol, len(clean.Checks))
			}
			checkReport(t, report, clean)
			leaky, _, ok := runAudit(t, bin, tc.protocol, tc.leak)
			i := slices.IndexFunc(leaky.Checks, func(c auditrun.JSONCheck) bool { return c.Name == tc.check })
			if ok || i < 0 || leaky.Checks[i].Pass || leaky.Checks[i].P > 1e-12 {
				t.Fatalf("with %s: exit 0 = %v, check %q at %d: %+v; want it failed decisively", tc.leak, ok, tc.check, i, leaky.Checks)
			}
			t.Logf("reported: %+v", leaky.Checks[i])
		})
	}
}

// checkReport parses the report's index.html and every SVG it shows as
// XML, and requires the plots the result calls for: the address
// histogram and the leaf histogram, with a bar per workload, and a row
// per check.
func checkReport(t *testing.T, dir string, res auditrun.JSONResult) {
	t.Helper()
	page := parseXML(t, filepath.Join(dir, "index.html"))
	if got := page.count("tr") - 1; got != len(res.Checks) {
		t.Errorf("the report's table has %d rows, the JSON %d checks", got, len(res.Checks))
	}
	srcs := page.attrs("img", "src")
	for _, want := range []string{"access.svg", "leaf.svg"} {
		if !slices.Contains(srcs, want) {
			t.Errorf("the report shows %v, not %s", srcs, want)
		}
	}
	for _, src := range srcs {
		svg := parseXML(t, filepath.Join(dir, src))
		series := svg.attrs("rect", "data-series")
		for _, w := range res.Workloads {
			if !slices.Contains(series, w) {
				t.Errorf("%s has no bar of workload %s", src, w)
			}
		}
	}
}

// xmlDoc is what checkReport needs of a parsed document.
type xmlDoc struct{ elems []xml.StartElement }

func (d xmlDoc) count(name string) int {
	n := 0
	for _, e := range d.elems {
		if e.Name.Local == name {
			n++
		}
	}
	return n
}

func (d xmlDoc) attrs(elem, attr string) []string {
	var out []string
	for _, e := range d.elems {
		for _, a := range e.Attr {
			if e.Name.Local == elem && a.Name.Local == attr {
				out = append(out, a.Value)
			}
		}
	}
	return out
}

// parseXML reads path as well-formed XML, failing t if it is not.
func parseXML(t *testing.T, path string) xmlDoc {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := xml.NewDecoder(f)
	var d xmlDoc
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return d
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", path, err)
		}
		if s, ok := tok.(xml.StartElement); ok {
			d.elems = append(d.elems, s)
		}
	}
}
