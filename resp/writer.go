package resp

import (
	"bufio"
	"strconv"
	"strings"
)

// writer encodes RESP2 replies into a buffered writer. Write errors are
// sticky in the bufio.Writer and surface at flush.
type writer struct {
	bw  *bufio.Writer
	num []byte // scratch for formatting lengths and integers
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

// null writes the null bulk string, "$-1\r\n".
func (w *writer) null() { w.bw.WriteString("$-1\r\n") }

// array writes the header of an array of n elements; the caller writes
// them.
func (w *writer) array(n int) { w.header('*', int64(n)) }

// nullArray writes the null array, "*-1\r\n".
func (w *writer) nullArray() { w.bw.WriteString("*-1\r\n") }

func (w *writer) header(kind byte, n int64) {
	w.num = append(w.num[:0], kind)
	w.num = strconv.AppendInt(w.num, n, 10)
	w.num = append(w.num, '\r', '\n')
	w.bw.Write(w.num)
}

func (w *writer) flush() error { return w.bw.Flush() }
