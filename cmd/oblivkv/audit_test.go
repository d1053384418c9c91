package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/auditrun"
)

// leakyBinary builds oblivkv with the oblivkv_leaks tag, in which the
// OBLIVKV_LEAK variable injects one of a protocol's leaks
// (internal/testsupport/leakenv).
func leakyBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "oblivkv-leaks")
	out, err := exec.Command("go", "build", "-tags", "oblivkv_leaks", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -tags oblivkv_leaks: %v\n%s", err, out)
	}
	return bin
}

// runAudit runs `bin audit --protocol p --json ... --report ... args...`
// with OBLIVKV_LEAK=leak (none when empty) and returns its JSON, its
// report directory and whether it exited 0.
func runAudit(t *testing.T, bin, p, leak string, args ...string) (auditrun.JSONResult, string, bool) {
	t.Helper()
	dir := t.TempDir()
	args = append([]string{"audit", "--protocol", p, "--json", filepath.Join(dir, "audit.json"), "--report", filepath.Join(dir, "report")}, args...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "OBLIVKV_LEAK="+leak)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	t.Logf("%s %v with leak %q:\n%s", p, args[6:], leak, lastLines(string(out), 2))
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

// leakCase is an injected leak of a protocol's own audit tests
// (TestAuditsCatchLeaks, oblivistore's TestAuditCatchesLeaks), the
// command's arguments that expose it, and the check that must fail on
// it: the one the protocol's test requires, as the command names it.
type leakCase struct {
	protocol, leak string
	args           []string
	check          string
}

// Arguments shared by several cases.
var (
	hotkey          = []string{"--workloads", "hotkey"}
	uniform         = []string{"--workloads", "uniform"}
	missing         = []string{"--workloads", "uniform,missing"}
	cloakPending    = []string{"--workloads", "uniform", "--clients", "32", "--opt", "s=0.8", "--opt", "pending=16"}
	treebeardBursts = []string{"--workloads", "uniform,bursts"}
	// cloakLong are the 20,000 requests that make cloak's keyed orders
	// fail decisively (at the default 1,500 they fail, not decisively; at
	// 10,000 keyed_read_order once gave p = 1.2e-11).
	cloakLong = []string{"--workloads", "hotkey", "--ops", "20000"}
)

// leakCases are every leak the protocols' audit tests inject into a
// store's workload (the recovery leaks of their crash audits aside).
var leakCases = []leakCase{
	{"treebeard", "repeat_reads_real_path", treebeardBursts, "bursts against uniform: distinct paths per multi-path read"},
	{"treebeard", "missing_keyed_position", missing, "missing against uniform: distinct paths per multi-path read"},
	{"treebeard", "evict_on_real_reads", hotkey, "hotkey: k paths evicted per A path reads"},
	{"treebeard", "eager_shard_parts", uniform, "uniform: one multi-path read per tree and epoch"},
	{"treebeard", "dummies_in_order", uniform, "uniform: slots path reads take, among their buckets' unread ones"},
	{"pathoram", "get_keeps_leaf", hotkey, "hotkey: consecutive reads of one path"},
	{"pathoram", "missing_keyed_leaf", missing, "missing: consecutive reads of one path"},
	{"pathoram", "unchanged_not_written", uniform, "uniform: one read and one write of a path per access"},
	{"pathoram", "inflight_not_read", uniform, "uniform: one read and one write of a path per access"},
	{"pathoram", "keyed_remap", hotkey, "hotkey: consecutive reads of one path"},
	{"pathoram", "chained_remap", hotkey, "hotkey: same successor again"},
	{"taostore", "repeat_reads_real_path", hotkey, "hotkey: path reads in flight together or consecutive"},
	{"taostore", "get_keeps_leaf", hotkey, "hotkey: path reads in flight together or consecutive"},
	{"taostore", "missing_keyed_leaf", missing, "missing: path reads in flight together or consecutive"},
	{"taostore", "put_writes_back", uniform, "uniform: a write-back of the paths every K path reads"},
	{"taostore", "unchanged_not_written", uniform, "uniform: write-backs are whole stored paths"},
	{"taostore", "unordered_replies", uniform, "replies leave in arrival order while storage holds a read back (CURIOUS)"},
	{"taostore", "keyed_remap", hotkey, "hotkey: path reads in flight together or consecutive"},
	{"taostore", "chained_remap", hotkey, "hotkey: same successor again"},
	{"waffle", "real_keeps_id", uniform, "uniform: every id written once, read at most once"},
	{"waffle", "read_in_plan_order", uniform, "uniform: read position and age"},
	{"waffle", "dummies_written_first", uniform, "uniform: write position and age"},
	{"waffle", "fixed_fill", []string{"--workloads", "zipf"}, "zipf: B = 5 addresses per batch call"},
	{"waffle", "random_fakes", uniform, "uniform: Theorem 7.1's alpha"},
	{"waffle", "victims_in_eviction_order", []string{"--workloads", "zipf"}, "zipf: write position and age"},
	{"waffle", "keyed_id_prefix", uniform, "uniform: ids sharing their first bytes"},
	{"cloak", "write_back_in_place", hotkey, "hotkey: one address read by consecutive batches"},
	{"cloak", "public_tie_order", hotkey, "hotkey: write position and age"},
	{"cloak", "skip_idle", uniform, "uniform: one batch per tick"},
	{"cloak", "early_when_full", cloakPending, "uniform: one batch per tick"},
	{"cloak", "drain_queue", uniform, "uniform: b_d addresses from every set d, written back as read"},
	{"cloak", "checkpoint_by_records", uniform, "uniform: a checkpoint every 100 batches"},
	{"cloak", "keyed_write_back", cloakLong, "hotkey: write position and age"},
	{"cloak", "keyed_read_order", cloakLong, "hotkey: read position and age"},
	{"oblivistore", "repeat_reads_real", hotkey, "hotkey: slots read once"},
	{"oblivistore", "skips_empty_reads", missing, "missing against uniform: slots per read"},
	{"oblivistore", "stops_at_real", missing, "missing against uniform: slots per read"},
	{"oblivistore", "keyed_partition", []string{"--workloads", "uniform,hotkey"}, "hotkey against uniform: slots per read"},
	{"oblivistore", "level_unpermuted", uniform, "uniform: slots read uniform among the unread"},
	{"oblivistore", "dummies_in_order", uniform, "uniform: slots read uniform among the unread"},
}

// cleanArgs are the clean runs: for each protocol every workload its
// cases use, and cloak again at the parameters of early_when_full.
var cleanArgs = map[string][][]string{
	"treebeard":   {{"--workloads", "uniform,hotkey,missing,bursts"}},
	"pathoram":    {{"--workloads", "uniform,hotkey,missing"}},
	"taostore":    {{"--workloads", "uniform,hotkey,missing"}},
	"waffle":      {{"--workloads", "zipf,uniform"}},
	"cloak":       {{"--workloads", "uniform,hotkey"}, cloakPending, cloakLong},
	"oblivistore": {{"--workloads", "uniform,hotkey,missing"}},
}

// TestAuditReportsInjectedLeaks runs `oblivkv audit` built with the leak
// hook. Without a leak every protocol passes every check (exit 0), with
// the arguments of all its cases; treebeard's, pathoram's and taostore's
// reports render (checkReport). With each injected leak of leakCases the
// JSON reports the case's check failed decisively (an exact violation or
// p <= 1e-12) and the command exits 1; the same check passed in the clean
// run. cloak/drain_queue leaves requests waiting for ever: the run is cut
// off after a bounded number of ticks and reported, not hung.
func TestAuditReportsInjectedLeaks(t *testing.T) {
	bin := leakyBinary(t)
	clean := map[string][]auditrun.JSONCheck{}
	for _, p := range slices.Sorted(maps.Keys(cleanArgs)) {
		t.Run("clean/"+p, func(t *testing.T) {
			for _, args := range cleanArgs[p] {
				res, report, ok := runAudit(t, bin, p, "", args...)
				if !ok || res.Protocol != p || len(res.Checks) == 0 {
					t.Fatalf("the clean audit: pass %v, protocol %q, %d checks: %+v", ok, res.Protocol, len(res.Checks), failedChecks(res))
				}
				clean[p] = append(clean[p], res.Checks...)
				if p == "treebeard" || p == "pathoram" || p == "taostore" {
					checkReport(t, report, res)
				}
			}
		})
	}
	for _, lc := range leakCases {
		t.Run(lc.protocol+"/"+lc.leak, func(t *testing.T) { catchLeak(t, bin, lc, clean[lc.protocol]) })
	}
}

// catchLeak runs the audit of lc and requires its check to fail
// decisively, having passed in the clean run.
func catchLeak(t *testing.T, bin string, lc leakCase, clean []auditrun.JSONCheck) {
	named := func(c auditrun.JSONCheck) bool { return c.Name == lc.check }
	if i := slices.IndexFunc(clean, named); i < 0 || !clean[i].Pass {
		t.Fatalf("the clean runs have no passing check %q", lc.check)
	}
	leaky, _, ok := runAudit(t, bin, lc.protocol, lc.protocol+"/"+lc.leak, lc.args...)
	i := slices.IndexFunc(leaky.Checks, named)
	if ok || i < 0 || leaky.Checks[i].Pass || leaky.Checks[i].P > 1e-12 {
		t.Fatalf("exit 0 = %v, check %q at %d; want it failed decisively; failed: %+v", ok, lc.check, i, failedChecks(leaky))
	}
	t.Logf("reported: %s: stat %v, p %v; %s", leaky.Checks[i].Name, leaky.Checks[i].Stat, leaky.Checks[i].P, leaky.Checks[i].Detail)
}

// failedChecks returns the checks of res that failed.
func failedChecks(res auditrun.JSONResult) []auditrun.JSONCheck {
	return slices.DeleteFunc(slices.Clone(res.Checks), func(c auditrun.JSONCheck) bool { return c.Pass })
}

// checkReport parses the report's index.html and every SVG it shows as
// XML, and requires the plots the result calls for: the address
// histogram and the leaf histogram, with a bar per workload, a row per
// check, and no formatting error (%!) in any file. (auditrun's
// TestReportShowsNumbers reads the cells.)
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

// parseXML reads path as well-formed XML with no formatting error (%!),
// failing t if it is not.
func parseXML(t *testing.T, path string) xmlDoc {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.Index(b, []byte("%!")); i >= 0 {
		t.Errorf("%s shows a formatting error: %q", path, b[i:min(i+40, len(b))])
	}
	dec := xml.NewDecoder(bytes.NewReader(b))
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
