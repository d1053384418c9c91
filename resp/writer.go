package resp

import (
	"bufio"
	"strconv"
	"strings"
)

// writer encodes replies into a buffered writer, in RESP2 or, once a
// client asked for it with HELLO 3, RESP3: the same replies but for the
// null (one "_") and maps (a "%" header instead of an array of pairs).
// Write errors are sticky in the bufio.Writer and surface at flush.
type writer struct {
	bw    *bufio.Writer
	num   []byte // scratch for formatting lengths and integers
	resp3 bool
}

func newWriter(bw *bufio.Writer) *writer {
	return &writer{bw: bw, num: make([]byte, 0, 24)}
}

var crlf = []byte("\r\n")

// simple writes a simple string reply: "+s\r\n". CR and LF in s, which
// would end the reply early, are written as spaces.
func (w *writer) simple(s string) {
	w.bw.WriteByte('+')
	w.line(s)
}

// err writes an error reply: "-s\r\n"; s starts with its prefix, e.g. "ERR ".
func (w *writer) err(s string) {
	w.bw.WriteByte('-')
	w.line(s)
}

func (w *writer) line(s string) {
	if !strings.ContainsAny(s, "\r\n") {
		w.bw.WriteString(s)
	} else {
		b := []byte(s)
		for i, c := range b {
			if c == '\r' || c == '\n' {
				b[i] = ' '
			}
		}
		w.bw.Write(b)
	}
	w.bw.Write(crlf)
}

// integer writes ":n\r\n".
func (w *writer) integer(n int64) { w.header(':', n) }

// bulk writes a bulk string reply: "$len\r\nb\r\n".
func (w *writer) bulk(b []byte) {
	w.header('$', int64(len(b)))
	w.bw.Write(b)
	w.bw.Write(crlf)
}

// bulkString is bulk for a string.
func (w *writer) bulkString(s string) {
	w.header('$', int64(len(s)))
	w.bw.WriteString(s)
	w.bw.Write(crlf)
}

// null writes the null bulk string, "$-1\r\n" ("_\r\n" in RESP3).
func (w *writer) null() {
	if w.resp3 {
		w.bw.WriteString("_\r\n")
		return
	}
	w.bw.WriteString("$-1\r\n")
}

// array writes the header of an array of n elements; the caller writes
// them.
func (w *writer) array(n int) { w.header('*', int64(n)) }

// nullArray writes the null array, "*-1\r\n" ("_\r\n" in RESP3).
func (w *writer) nullArray() {
	if w.resp3 {
		w.bw.WriteString("_\r\n")
		return
	}
	w.bw.WriteString("*-1\r\n")
}

// mapHeader writes the header of a map of n pairs: in RESP2 an array of
// 2n elements, keys and values in turn, as Redis replies maps there; the
// caller writes them.
func (w *writer) mapHeader(n int) {
	if w.resp3 {
		w.header('%', int64(n))
		return
	}
	w.array(2 * n)
}

func (w *writer) header(kind byte, n int64) {
	w.num = append(w.num[:0], kind)
	w.num = strconv.AppendInt(w.num, n, 10)
	w.num = append(w.num, '\r', '\n')
	w.bw.Write(w.num)
}

func (w *writer) flush() error { return w.bw.Flush() }
