package resp

import (
	"bufio"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

var testLimits = limits{bulk: 64, array: 8, inline: 64, request: 128}

// parseAll parses every request of in, and returns them with the error
// that ended the input (io.EOF for a clean end).
func parseAll(in string, lim limits) ([][]string, error) {
	r := newReader(bufio.NewReaderSize(strings.NewReader(in), 16), lim)
	var out [][]string
	for {
		args, err := r.readCommand()
		if err != nil {
			return out, err
		}
		out = append(out, toStrings(args))
	}
}

func toStrings(args [][]byte) []string {
	s := make([]string, len(args))
	for i, a := range args {
		s[i] = string(a)
	}
	return s
}

func TestParserValid(t *testing.T) {
	tests := []struct {
		name, in string
		want     [][]string
	}{
		{"array", "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n", [][]string{{"SET", "k", "value"}}},
		{"empty bulk", "*2\r\n$3\r\nGET\r\n$0\r\n\r\n", [][]string{{"GET", ""}}},
		{"binary bulk", "*2\r\n$4\r\na\r\nb\r\n$2\r\n\x00\xff\r\n", [][]string{{"a\r\nb", "\x00\xff"}}},
		{"empty and null arrays skipped", "*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n", [][]string{{"PING"}}},
		{"inline", "GET key\r\n", [][]string{{"GET", "key"}}},
		{"inline LF only", "SET a b\n", [][]string{{"SET", "a", "b"}}},
		{"inline blank lines skipped", "\r\n  \r\n\nPING\r\n", [][]string{{"PING"}}},
		{"inline spaces and tabs", "  SET \t a   b  \r\n", [][]string{{"SET", "a", "b"}}},
		{"inline double quotes", `SET "a b" "x\ty\n\x41\"\\"` + "\r\n", [][]string{{"SET", "a b", "x\ty\nA\"\\"}}},
		{"inline single quotes", `SET 'a "b' 'it\'s'` + "\r\n", [][]string{{"SET", `a "b`, "it's"}}},
		{"inline quote mid word", `SET ab"c d"` + "\r\n", [][]string{{"SET", "abc d"}}},
		{"inline empty quoted", `SET k ""` + "\r\n", [][]string{{"SET", "k", ""}}},
		{"pipelined arrays", "*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1\r\na\r\n*1\r\n$6\r\nDBSIZE\r\n",
			[][]string{{"PING"}, {"GET", "a"}, {"DBSIZE"}}},
		{"pipelined mixed", "PING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\nGET x\n",
			[][]string{{"PING"}, {"ECHO", "hi"}, {"GET", "x"}}},
		{"at limits", "*8\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$64\r\n" +
			strings.Repeat("v", 64) + "\r\n", [][]string{{"a", "a", "a", "a", "a", "a", "a", strings.Repeat("v", 64)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseAll(tt.in, testLimits)
			if !errors.Is(err, io.EOF) {
				t.Fatalf("error %v, want io.EOF after %q", err, got)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParserMalformed(t *testing.T) {
	long := strings.Repeat("x", 65)
	tests := []struct {
		name, in string
		want     error // a *protocolError (compared by text) or io.ErrUnexpectedEOF
	}{
		{"bad element type", "*1\r\n+PING\r\n", protoErr("expected '$', got '+'")},
		{"integer element", "*1\r\n:1\r\n", protoErr("expected '$', got ':'")},
		{"nested array", "*1\r\n*1\r\n$1\r\na\r\n", protoErr("expected '$', got '*'")},
		{"negative array", "*-2\r\n", errArrayLen},
		{"huge array", "*9\r\n", errArrayLen},
		{"overflowing array", "*99999999999999999999\r\n", errArrayLen},
		{"non-numeric array", "*abc\r\n", errArrayLen},
		{"empty array length", "*\r\n", errArrayLen},
		{"array length with space", "*1 \r\n$1\r\na\r\n", errArrayLen},
		{"array header too long", "*" + strings.Repeat("1", 40) + "\r\n", errArrayLen},
		{"array header without CR", "*1\n$4\r\nPING\r\n", errCRLF},
		{"negative bulk", "*1\r\n$-1\r\n", errBulkLen},
		{"huge bulk", "*1\r\n$65\r\n", errBulkLen},
		{"100 MB bulk", "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000000\r\n", errBulkLen},
		{"non-numeric bulk", "*1\r\n$x\r\n", errBulkLen},
		{"bulk plus sign", "*1\r\n$+1\r\na\r\n", errBulkLen},
		{"bulk header without CR", "*1\r\n$1\na\r\n", errCRLF},
		{"bulk without CRLF", "*1\r\n$1\r\nabc\r\n", errCRLF},
		{"bulk with LF only", "*1\r\n$1\r\na\n", errCRLF},
		{"request too large", "*3\r\n$60\r\n" + strings.Repeat("a", 60) + "\r\n$60\r\n" +
			strings.Repeat("b", 60) + "\r\n$60\r\n", errRequestLen},
		{"inline too long", long + "\r\n", errInlineLen},
		{"inline too long without newline", long, errInlineLen},
		{"inline too many args", "a b c d e f g h i\r\n", errArrayLen},
		{"inline unbalanced double", `SET "a` + "\r\n", errQuotes},
		{"inline unbalanced single", `SET 'a` + "\r\n", errQuotes},
		{"inline trailing backslash", `SET "a\` + "\r\n", errQuotes},
		{"inline text after quote", `SET "a"b` + "\r\n", errQuotes},
		{"truncated array header", "*2", io.ErrUnexpectedEOF},
		{"truncated before element", "*2\r\n$3\r\nGET\r\n", io.ErrUnexpectedEOF},
		{"truncated bulk header", "*1\r\n$3", io.ErrUnexpectedEOF},
		{"truncated bulk body", "*1\r\n$10\r\nabc", io.ErrUnexpectedEOF},
		{"truncated bulk CRLF", "*1\r\n$3\r\nabc\r", io.ErrUnexpectedEOF},
		{"truncated inline", "GET a", io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseAll(tt.in, testLimits)
			if len(got) != 0 {
				t.Errorf("parsed %q before the error", got)
			}
			if err == nil || err.Error() != tt.want.Error() {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
		})
	}
}

// TestParserErrorAfterValid checks that requests before a malformed one are
// returned.
func TestParserErrorAfterValid(t *testing.T) {
	got, err := parseAll("PING\r\n*1\r\n$1\r\nab\r\n", testLimits)
	if !reflect.DeepEqual(got, [][]string{{"PING"}}) || !errors.Is(err, errCRLF) {
		t.Fatalf("got %q, %v", got, err)
	}
}

// TestParserOneByteReads feeds the input one byte per read, so that every
// line and body spans reads.
func TestParserOneByteReads(t *testing.T) {
	in := "*2\r\n$4\r\nECHO\r\n$20\r\n" + strings.Repeat("z", 20) + "\r\nSET \"a b\" c\r\n"
	br := bufio.NewReaderSize(iotest.OneByteReader(strings.NewReader(in)), 16)
	r := newReader(br, testLimits)
	var got [][]string
	for {
		args, err := r.readCommand()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, toStrings(args))
	}
	want := [][]string{{"ECHO", strings.Repeat("z", 20)}, {"SET", "a b", "c"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestParserLongInline checks an inline line longer than the read buffer
// but within the limit.
func TestParserLongInline(t *testing.T) {
	arg := strings.Repeat("y", 50)
	got, err := parseAll("ECHO "+arg+"\r\n", testLimits)
	if !errors.Is(err, io.EOF) || !reflect.DeepEqual(got, [][]string{{"ECHO", arg}}) {
		t.Fatalf("got %q, %v", got, err)
	}
}

// TestParserArgsCapped checks that appending to one argument cannot
// overwrite the next.
func TestParserArgsCapped(t *testing.T) {
	r := newReader(bufio.NewReader(strings.NewReader("*2\r\n$1\r\na\r\n$1\r\nb\r\n")), testLimits)
	args, err := r.readCommand()
	if err != nil {
		t.Fatal(err)
	}
	_ = append(args[0], 'X')
	if string(args[1]) != "b" {
		t.Fatalf("second argument overwritten: %q", args[1])
	}
}

// TestParserNoPreallocation checks that a large declared length allocates
// in proportion to the bytes received, not to the length.
func TestParserNoPreallocation(t *testing.T) {
	lim := limits{bulk: 1 << 30, array: 1 << 20, inline: 1 << 10, request: 1 << 30}
	in := "*1000000\r\n$1000000000\r\nabc"
	r := newReader(bufio.NewReader(strings.NewReader(in)), lim)
	if _, err := r.readCommand(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("error %v, want io.ErrUnexpectedEOF", err)
	}
	if cap(r.arena) > 2*minGrow || cap(r.ends) > 16 {
		t.Fatalf("arena cap %d, ends cap %d: preallocated from a header", cap(r.arena), cap(r.ends))
	}
}

func TestParseInt(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "7": 7, "-1": -1, "123456789012345678": 123456789012345678} {
		if n, ok := parseInt([]byte(in)); !ok || n != want {
			t.Errorf("parseInt(%q) = %d, %v", in, n, ok)
		}
	}
	for _, in := range []string{"", "-", "+1", "1a", " 1", "1234567890123456789", "--1"} {
		if n, ok := parseInt([]byte(in)); ok {
			t.Errorf("parseInt(%q) = %d, want failure", in, n)
		}
	}
}
