package resp

import (
	"bufio"
	"bytes"
	"errors"
	"slices"
	"testing"
)

func TestWriter(t *testing.T) {
	tests := []struct {
		name  string
		write func(w *writer)
		want  string
	}{
		{"simple", func(w *writer) { w.simple("OK") }, "+OK\r\n"},
		{"simple with newline", func(w *writer) { w.simple("a\r\nb") }, "+a  b\r\n"},
		{"error", func(w *writer) { w.err("ERR bad") }, "-ERR bad\r\n"},
		{"error with newline", func(w *writer) { w.err("ERR a\nb") }, "-ERR a b\r\n"},
		{"integer", func(w *writer) { w.integer(42) }, ":42\r\n"},
		{"negative integer", func(w *writer) { w.integer(-7) }, ":-7\r\n"},
		{"bulk", func(w *writer) { w.bulk([]byte("a\r\nb")) }, "$4\r\na\r\nb\r\n"},
		{"empty bulk", func(w *writer) { w.bulk([]byte{}) }, "$0\r\n\r\n"},
		{"bulk string", func(w *writer) { w.bulkString("hé") }, "$3\r\nhé\r\n"},
		{"null bulk", func(w *writer) { w.null() }, "$-1\r\n"},
		{"array", func(w *writer) { w.array(2); w.bulkString("a"); w.null() }, "*2\r\n$1\r\na\r\n$-1\r\n"},
		{"empty array", func(w *writer) { w.array(0) }, "*0\r\n"},
		{"null array", func(w *writer) { w.nullArray() }, "*-1\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := newWriter(bufio.NewWriter(&buf))
			tt.write(w)
			if err := w.flush(); err != nil {
				t.Fatal(err)
			}
			if buf.String() != tt.want {
				t.Fatalf("wrote %q, want %q", buf.String(), tt.want)
			}
		})
	}
}

// TestWriterRoundTrip checks that a bulk array the writer encodes is what
// the parser reads back.
func TestWriterRoundTrip(t *testing.T) {
	args := [][]byte{[]byte("SET"), []byte("k\x00\r\n"), {}}
	got := toStrings(mustParse(t, encodeArray(args)))
	if want := toStrings(args); !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

func TestWriterError(t *testing.T) {
	w := newWriter(bufio.NewWriterSize(failWriter{}, 16))
	w.bulk(bytes.Repeat([]byte("x"), 64))
	if err := w.flush(); err == nil {
		t.Fatal("flush to a failing writer succeeded")
	}
}

// encodeArray encodes args as a RESP array of bulk strings.
func encodeArray(args [][]byte) []byte {
	var buf bytes.Buffer
	w := newWriter(bufio.NewWriter(&buf))
	w.array(len(args))
	for _, a := range args {
		w.bulk(a)
	}
	w.flush()
	return buf.Bytes()
}

func mustParse(t *testing.T, in []byte) [][]byte {
	t.Helper()
	r := newReader(bufio.NewReader(bytes.NewReader(in)), testLimits)
	args, err := r.readCommand()
	if err != nil {
		t.Fatal(err)
	}
	return args
}
