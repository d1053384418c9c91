package workload

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseTraceWithOps(t *testing.T) {
	const text = "# a comment\n" +
		"alpha r\n" +
		"\n" +
		"beta,W\r\n" +
		"   # an indented comment\n" +
		"alpha\tGET\n" +
		"gamma ,  put\n" +
		"beta, Set\n" +
		"  delta   update  \n" +
		"alpha read\n" +
		"beta write\n"
	tr, err := ParseTrace(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"alpha", "beta", "gamma", "delta"}; !slices.Equal(tr.keys, want) || tr.Records() != 4 {
		t.Errorf("keys %q, want %q", tr.keys, want)
	}
	wantRecs := []uint64{0, 1, 0, 2, 1, 3, 0, 1}
	wantOps := []Op{Read, Update, Read, Update, Update, Update, Read, Update}
	if tr.Len() != 8 || !tr.HasOps() {
		t.Fatalf("len %d, ops %v", tr.Len(), tr.HasOps())
	}
	for i := range uint64(16) { // twice round: At wraps
		rec, op, ok := tr.At(i)
		if rec != wantRecs[i%8] || op != wantOps[i%8] || !ok {
			t.Errorf("entry %d = %d %v %v; want %d %v", i, rec, op, ok, wantRecs[i%8], wantOps[i%8])
		}
	}
	keys := KeysFor(tr, 4)
	if keys.Key(2) != "gamma" || keys.Key(0) != "alpha" {
		t.Errorf("record keys %q %q", keys.Key(0), keys.Key(2))
	}
	if d := tr.Describe(); !strings.Contains(d, "8 entries over 4 keys") || !strings.Contains(d, "from the file") {
		t.Errorf("description %q", d)
	}
}

func TestParseTraceWithoutOps(t *testing.T) {
	tr, err := ParseTrace(strings.NewReader("k1\nk2\n\n# c\nk1\nuser007\n"))
	if err != nil {
		t.Fatal(err)
	}
	if tr.HasOps() || tr.Len() != 4 || tr.Records() != 3 {
		t.Fatalf("ops %v, %d entries, %d records", tr.HasOps(), tr.Len(), tr.Records())
	}
	if rec, _, ok := tr.At(2); rec != 0 || ok {
		t.Errorf("entry 2 = %d, %v; want record 0 without an operation", rec, ok)
	}
}

func TestParseTraceErrors(t *testing.T) {
	for text, want := range map[string]string{
		"a r\nb x\n":               "line 2: unknown operation \"x\"",
		"a\n# c\n\nb r extra\n":    "line 4: malformed",
		"a r\n,r\n":                "line 2: malformed",
		"a,\n":                     "line 1: malformed",
		"a,,r\n":                   "line 1: malformed",
		"a r\nb\n":                 "line 2: no operation is given, but line 1 an operation is given",
		"# header\na\nb w\n":       "line 3: an operation is given, but line 2 no operation is given",
		"":                         "no entries",
		"# only a comment\n\n  \n": "no entries",
	} {
		_, err := ParseTrace(strings.NewReader(text))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseTrace(%q) = %v, want an error containing %q", text, err, want)
		}
	}
}

func TestReadTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.txt")
	if err := os.WriteFile(path, []byte("x w\ny r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tr, err := ReadTrace(path)
	if err != nil || tr.Name() != "trace" || !strings.Contains(tr.Describe(), "t.txt") {
		t.Fatalf("%v, %v", tr, err)
	}
	if err := os.WriteFile(path, []byte("x w\ny q\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadTrace(path); err == nil || !strings.Contains(err.Error(), "t.txt: line 2") {
		t.Errorf("bad trace: %v", err)
	}
	if _, err := ReadTrace(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("missing file accepted")
	}
}

func TestMixEntry(t *testing.T) {
	m, _ := MixByName("B")
	updates := 0
	for i := range uint64(draws) {
		if m.entry(5, i) == Update {
			updates++
		}
	}
	if share := float64(updates) / draws; math.Abs(share-0.05) > 0.005 {
		t.Errorf("update share %.4f, want 0.05", share)
	}
	same := 0
	for i := range uint64(1000) {
		if m.entry(5, i) == m.entry(6, i) {
			same++
		}
	}
	if same == 1000 {
		t.Error("Entry ignores the seed")
	}
}
