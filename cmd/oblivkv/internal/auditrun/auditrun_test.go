package auditrun

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/internal/durable"

	"github.com/oblivkv/oblivkv/kv"
	_ "github.com/oblivkv/oblivkv/protocol/all"
)

// oblivious are the registered protocols that promise to hide access
// patterns: all but the insecure baselines.
func oblivious() []string {
	return slices.DeleteFunc(kv.Protocols(), func(name string) bool {
		p, _ := kv.Lookup(name)
		return p.Insecure()
	})
}

// TestAttackerRecoversEncrypted shows the frequency attacker breaking
// "encryption alone": from encrypted's Tap log under Zipf 0.99 it names
// the address of at least 80% of the 100 most popular keys, far past the
// chance bound, and the attack check fails.
func TestAttackerRecoversEncrypted(t *testing.T) {
	res, err := Audit(t.Context(), Config{Protocol: "encrypted", Workloads: []string{"zipf"}, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	a := res.Attack
	t.Logf("encrypted: %.0f%% of the top 100 keys recovered, chance %.2f%%, bound %.0f%%", 100*a.Accuracy, 100*a.Chance, 100*a.Bound)
	if a.Accuracy < 0.8 || a.Check.Pass() {
		t.Fatalf("the attacker recovered %.0f%% (check %v); want at least 80%% and a failed check", 100*a.Accuracy, a.Check)
	}
}

// TestObliviousProtocolsPass runs the whole audit on every oblivious
// protocol: the attacker stays within the chance bound, and every check
// passes.
func TestObliviousProtocolsPass(t *testing.T) {
	for _, p := range oblivious() {
		t.Run(p, func(t *testing.T) {
			start := time.Now()
			res, err := Audit(t.Context(), Config{Protocol: p, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			a := res.Attack
			t.Logf("%s in %v: attacker %.0f%% of the top 100 keys, chance %.1f%%, bound %.0f%%", p, time.Since(start).Round(time.Millisecond), 100*a.Accuracy, 100*a.Chance, 100*a.Bound)
			for _, c := range res.Checks {
				t.Log(c)
				if !c.Pass() {
					t.Error(c)
				}
			}
			if a.Accuracy > a.Bound {
				t.Errorf("the attacker recovered %.0f%% of the top 100 keys; the chance bound is %.0f%%", 100*a.Accuracy, 100*a.Bound)
			}
		})
	}
}

// TestUntestableCheckNotApplicable: a statistical check with too few
// samples, whose critical value is infinite, shows as not applicable in
// the summary ("critical n/a"), the JSON (a null critical) and the
// report, never as a huge number; a tested check keeps its critical
// value.
func TestUntestableCheckNotApplicable(t *testing.T) {
	res := &Result{Config: Config{Protocol: "x", Workloads: []string{"uniform"}}, Checks: []audit.Check{
		audit.Uniform("too few", []int{3}),
		audit.Uniform("tested", []int{10, 10, 10}),
	}}
	if s := res.String(); !strings.Contains(s, "too few: pass, statistic 0 (critical n/a") || strings.Contains(s, "e+308") {
		t.Errorf("summary:\n%s", s)
	}
	var buf bytes.Buffer
	if err := res.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var back JSONResult
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if c := back.Checks; c[0].Critical != nil || c[1].Critical == nil || *c[1].Critical <= 0 || !strings.Contains(buf.String(), `"critical": null`) {
		t.Errorf("JSON: %s", buf.String())
	}
	page := writtenPage(t, res)
	if !strings.Contains(string(page), `<td class="num">n/a</td>`) || strings.Contains(string(page), "e+308") {
		t.Errorf("report:\n%s", page)
	}
}

// TestAddressesUnderPrefixes: every address a run of each registered
// protocol touches begins with a prefix its registration names
// (auditspec.Spec.Prefixes), kv's metadata record and the journal's
// anchor aside.
func TestAddressesUnderPrefixes(t *testing.T) {
	for _, p := range kv.Protocols() {
		t.Run(p, func(t *testing.T) {
			r := runUniform(t, Config{Protocol: p, Workloads: []string{"uniform"}, Ops: 200, Seed: 1}.withDefaults())
			prefixes := specOf(p).Prefixes
			for _, rec := range r.All {
				for _, a := range rec.Addrs {
					if a != kv.MetaAddr && a != durable.AnchorAddr && !slices.ContainsFunc(prefixes, func(pre string) bool { return strings.HasPrefix(a, pre) }) {
						t.Fatalf("call %d (%v) touches %q, under none of the prefixes %q", rec.Seq, rec.Op, a, prefixes)
					}
				}
			}
		})
	}
}
