package workload

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
)

// Trace is a replayed trace file: a Sequence whose records are the
// file's distinct keys, numbered in order of first appearance (record i's
// key is the i-th distinct key, see KeysFor), and whose entries are the
// file's lines in order.
//
// The format is one key per line, optionally followed by whitespace or a
// comma and an operation: r, read or get for a read; w, write, set,
// update or put for an update (case does not matter). Blank lines and
// lines whose first non-blank character is # are skipped. Either every
// entry has an operation or none has: with them, the run replays the
// file's operations instead of its workload's mix; without them, the mix
// draws each entry's operation.
type Trace struct {
	name string   // the file's base name, for descriptions
	keys []string // distinct keys: record i is keys[i]
	recs []uint64 // entry -> record
	ops  []Op     // entry -> operation; nil when the file has none
}

// ReadTrace reads and parses the trace file at path.
func ReadTrace(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := ParseTrace(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t.name = filepath.Base(path)
	return t, nil
}

// ParseTrace parses a trace (see Trace). An error names the line (from 1)
// it is about.
func ParseTrace(r io.Reader) (*Trace, error) {
	t := &Trace{name: "trace"}
	index := map[string]uint64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	firstOps, line := 0, 0 // the line that decided whether entries have operations
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		key, opText, hasOp, err := splitTraceLine(text)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if firstOps == 0 {
			firstOps = line
			if hasOp {
				t.ops = []Op{}
			}
		} else if hasOp != (t.ops != nil) {
			return nil, fmt.Errorf("line %d: %s, but line %d %s: give an operation on every line or on none",
				line, has(hasOp), firstOps, has(t.ops != nil))
		}
		if hasOp {
			op, err := parseTraceOp(opText)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
			t.ops = append(t.ops, op)
		}
		rec, ok := index[key]
		if !ok {
			rec = uint64(len(t.keys))
			index[key] = rec
			t.keys = append(t.keys, key)
		}
		t.recs = append(t.recs, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", line+1, err)
	}
	if len(t.recs) == 0 {
		return nil, errors.New("the trace has no entries")
	}
	return t, nil
}

func has(op bool) string {
	if op {
		return "an operation is given"
	}
	return "no operation is given"
}

// splitTraceLine cuts a trimmed, non-empty line into its key and its
// operation, if any.
func splitTraceLine(text string) (key, op string, hasOp bool, err error) {
	i := strings.IndexFunc(text, func(r rune) bool { return r == ',' || isSpace(r) })
	if i < 0 {
		return text, "", false, nil
	}
	key = text[:i]
	if key == "" {
		return "", "", false, fmt.Errorf("malformed line %q: no key before the separator", text)
	}
	// Whitespace, at most one comma, whitespace.
	rest := strings.TrimLeftFunc(text[i:], isSpace)
	rest = strings.TrimLeftFunc(strings.TrimPrefix(rest, ","), isSpace)
	if rest == "" {
		return "", "", false, fmt.Errorf("malformed line %q: a separator but no operation", text)
	}
	if j := strings.IndexFunc(rest, func(r rune) bool { return r == ',' || isSpace(r) }); j >= 0 {
		return "", "", false, fmt.Errorf("malformed line %q: want a key and at most one operation", text)
	}
	return key, rest, true, nil
}

func isSpace(r rune) bool { return r == ' ' || r == '\t' || r == '\r' || r == '\v' || r == '\f' }

func parseTraceOp(s string) (Op, error) {
	switch strings.ToLower(s) {
	case "r", "read", "get":
		return Read, nil
	case "w", "write", "set", "update", "put":
		return Update, nil
	}
	return 0, fmt.Errorf("unknown operation %q (want r, read, get, w, write, set, update or put)", s)
}

// Name implements Distribution.
func (*Trace) Name() string { return "trace" }

// Describe is a one-line description of the trace.
func (t *Trace) Describe() string {
	ops := "operations from the workload's mix"
	if t.HasOps() {
		ops = "operations from the file"
	}
	return fmt.Sprintf("trace %s (%d entries over %d keys, %s)", t.name, len(t.recs), len(t.keys), ops)
}

// Records is the number of distinct keys, the run's records.
func (t *Trace) Records() uint64 { return uint64(len(t.keys)) }

// Len implements Sequence.
func (t *Trace) Len() uint64 { return uint64(len(t.recs)) }

// At implements Sequence.
func (t *Trace) At(i uint64) (uint64, Op, bool) {
	i %= uint64(len(t.recs))
	if t.ops == nil {
		return t.recs[i], 0, false
	}
	return t.recs[i], t.ops[i], true
}

// HasOps implements Sequence.
func (t *Trace) HasOps() bool { return t.ops != nil }

// Worker implements Distribution: a cursor of its own over the trace.
func (t *Trace) Worker(int, *rand.Rand) Chooser { return sequenceWorker(t) }
