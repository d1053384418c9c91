package main

import (
	"bytes"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/protocol/tree"
)

// runSimCmd runs `oblivkv sim args...` and returns its stdout.
func runSimCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newSimCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(io.Discard)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// simRows returns the table rows of `sim multipath` output keyed by batch.
func simRows(t *testing.T, out string) map[int][]string {
	t.Helper()
	rows := map[int][]string{}
	for line := range strings.SplitSeq(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) != 6 {
			continue
		}
		if b, err := strconv.Atoi(strings.TrimSuffix(fields[0], "*")); err == nil {
			rows[b] = fields
		}
	}
	return rows
}

func TestSimMultipath(t *testing.T) {
	const levels = 12
	args := []string{"multipath", "--leaves-log", strconv.Itoa(levels), "--requests", "60000", "--batches", "1, 5,50,300", "--seed", "3"}
	out, err := runSimCmd(t, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	rows := simRows(t, out)
	if len(rows) != 4 {
		t.Fatalf("want a row for each of 4 batches, got %d:\n%s", len(rows), out)
	}
	g := tree.Geometry{L: levels}
	for _, b := range []int{1, 5, 50, 300} {
		row, ok := rows[b]
		if !ok {
			t.Fatalf("no row for batch %d:\n%s", b, out)
		}
		sim, err1 := strconv.ParseFloat(row[1], 64)
		cf, err2 := strconv.ParseFloat(row[2], 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("batch %d: unparsable row %q", b, row)
		}
		want := tree.ExpectedMultiPathCost(g, b)
		if math.Abs(cf-want) > 0.005 {
			t.Errorf("batch %d: closed form column %v, want %.4f", b, cf, want)
		}
		if math.Abs(sim-want) > 0.02*want {
			t.Errorf("batch %d: simulated %v, closed form %.4f", b, sim, want)
		}
		// Not the paper's tree: no paper values.
		if row[4] != "-" || row[5] != "-" {
			t.Errorf("batch %d: paper columns %q on a tree of 2^%d leaves", b, row[4:], levels)
		}
	}
	if rows[1][1] != strconv.Itoa(levels+1)+".00" {
		t.Errorf("batch 1 (Ring ORAM): %s buckets per request, want %d.00", rows[1][1], levels+1)
	}

	// Same seed, same output.
	again, err := runSimCmd(t, args...)
	if err != nil || again != out {
		t.Errorf("second run differs (%v):\n%s\nvs\n%s", err, again, out)
	}
}

// On the paper's tree the paper's values appear, and batch 5 carries the
// note that the paper's "B=5" value belongs to batch 50.
func TestSimMultipathPaperColumns(t *testing.T) {
	out, err := runSimCmd(t, "multipath", "--requests", "3000", "--batches", "5,50,100,7")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	rows := simRows(t, out)
	if len(rows) != 4 || rows[5][4] != "15.46†" || rows[50][4] != "15.46‡" || rows[100][4] != "14.46" || rows[7][4] != "-" {
		t.Errorf("paper columns wrong:\n%s", out)
	}
	if rows[7] != nil && rows[7][0] != "7*" {
		t.Errorf("batch 7 does not divide 3000 requests but is not marked: %q", rows[7])
	}
	// Batch 5 is compared with the paper's "B=5" value, marked; batch 50
	// with the same value, unmarked; a batch the paper lacks with nothing.
	if rows[5] != nil && (!strings.HasSuffix(rows[5][5], "%†") || strings.HasPrefix(rows[5][5], "-")) {
		t.Errorf("batch 5: SIM VS PAPER %q; want a marked rise over 15.46 (batch 5 costs about 18.74)", rows[5][5])
	}
	if (rows[50] != nil && !strings.HasSuffix(rows[50][5], "%")) || (rows[7] != nil && rows[7][5] != "-") {
		t.Errorf("SIM VS PAPER of batches 50 and 7: %q, %q; want a percentage and -", rows[50], rows[7])
	}
	if !strings.Contains(out, "batch 50") || !strings.Contains(out, "short") {
		t.Errorf("notes missing:\n%s", out)
	}
}

func TestSimMultipathBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"multipath", "--batches", "1,0"},
		{"multipath", "--batches", "1,x"},
		{"multipath", "--batches", ""},
		{"multipath", "--requests", "0"},
		{"multipath", "--leaves-log", "0"},
		{"multipath", "--leaves-log", "99"},
	} {
		if out, err := runSimCmd(t, args...); err == nil {
			t.Errorf("%q: no error\n%s", args, out)
		}
	}
}
