package resp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"slices"
)

// protocolError is a malformed or over-limit request. The server replies
// "ERR " + its text and closes the connection, as Redis does.
type protocolError struct{ msg string }

func (e *protocolError) Error() string { return "Protocol error: " + e.msg }

func protoErr(msg string) *protocolError { return &protocolError{msg} }

// The protocol errors of the parser, worded as Redis words them where Redis
// has a word for them.
var (
	errArrayLen   = protoErr("invalid multibulk length")
	errBulkLen    = protoErr("invalid bulk length")
	errInlineLen  = protoErr("too big inline request")
	errQuotes     = protoErr("unbalanced quotes in request")
	errCRLF       = protoErr("expected '\\r\\n'")
	errRequestLen = protoErr("request too large")
)

// limits bounds what one request may make the parser hold.
type limits struct {
	bulk    int // bytes in one argument
	array   int // arguments in one request
	inline  int // bytes in one inline request line
	request int // bytes of all the arguments of one request
}

const (
	maxHeaderLen = 32      // "*" or "$", a number, CRLF: far less than this
	minGrow      = 4 << 10 // smallest growth of the argument arena
	keepArena    = 1 << 20 // arenas larger than this are dropped after use
	keepArgs     = 4096    // argument slices longer than this are dropped
)

// reader parses requests: RESP arrays of bulk strings and inline commands.
// It never allocates in proportion to a length it has been told, only to
// the bytes it has received.
type reader struct {
	br    *bufio.Reader
	lim   limits
	arena []byte   // the bytes of every argument of the current request
	ends  []int    // end offset of each argument in arena
	args  [][]byte // the arguments, slices of arena
	line  []byte   // a line longer than br's buffer, assembled
}

func newReader(br *bufio.Reader, lim limits) *reader {
	return &reader{br: br, lim: lim}
}

// buffered is the number of bytes received and not yet parsed.
func (r *reader) buffered() int { return r.br.Buffered() }

// readCommand returns the next request's arguments (at least one). They
// stay valid until the next call. Empty requests (blank lines, "*0") are
// skipped. It returns io.EOF at a clean end of input, io.ErrUnexpectedEOF
// inside a request, a *protocolError for malformed input, or the read
// error.
func (r *reader) readCommand() ([][]byte, error) {
	for {
		r.reset()
		first, err := r.br.Peek(1)
		if err != nil {
			return nil, err
		}
		if first[0] == '*' {
			err = r.readArray()
		} else {
			err = r.readInline()
		}
		if err != nil {
			return nil, err
		}
		if len(r.ends) > 0 {
			return r.finish(), nil
		}
	}
}

func (r *reader) reset() {
	if cap(r.arena) > keepArena {
		r.arena = nil
	}
	if cap(r.args) > keepArgs {
		r.args, r.ends = nil, nil
	}
	r.arena, r.ends, r.line = r.arena[:0], r.ends[:0], r.line[:0]
}

// finish slices the arena into the arguments; each is capped so that
// appending to it cannot overwrite the next.
func (r *reader) finish() [][]byte {
	r.args = r.args[:0]
	start := 0
	for _, end := range r.ends {
		r.args = append(r.args, r.arena[start:end:end])
		start = end
	}
	return r.args
}

// readArray reads "*<n>\r\n" and n bulk strings.
func (r *reader) readArray() error {
	n, err := r.readHeader(errArrayLen)
	if err != nil {
		return err
	}
	if n == 0 || n == -1 {
		return nil // an empty or null array: nothing to run, as in Redis
	}
	if n < 0 || n > int64(r.lim.array) {
		return errArrayLen
	}
	for range n {
		if err := r.readBulk(); err != nil {
			return err
		}
	}
	return nil
}

// readBulk reads "$<n>\r\n" followed by n bytes and CRLF.
func (r *reader) readBulk() error {
	first, err := r.br.Peek(1)
	if err != nil {
		return unexpected(err)
	}
	if first[0] != '$' {
		return protoErr("expected '$', got '" + string(first[0]) + "'")
	}
	n, err := r.readHeader(errBulkLen)
	if err != nil {
		return err
	}
	if n < 0 || n > int64(r.lim.bulk) {
		return errBulkLen
	}
	if int64(len(r.arena))+n > int64(r.lim.request) {
		return errRequestLen
	}
	if err := r.readBody(int(n)); err != nil {
		return err
	}
	r.ends = append(r.ends, len(r.arena))
	return nil
}

// readBody appends n bytes to the arena, growing it only as the bytes
// arrive, then consumes the CRLF after them.
func (r *reader) readBody(n int) error {
	for n > 0 {
		step := min(n, max(minGrow, len(r.arena)))
		start := len(r.arena)
		r.arena = slices.Grow(r.arena, step)[:start+step]
		if _, err := io.ReadFull(r.br, r.arena[start:]); err != nil {
			r.arena = r.arena[:start]
			return unexpected(err)
		}
		n -= step
	}
	return r.readCRLF()
}

func (r *reader) readCRLF() error {
	for _, want := range crlf {
		c, err := r.br.ReadByte()
		if err != nil {
			return unexpected(err)
		}
		if c != want {
			return errCRLF
		}
	}
	return nil
}

// readHeader reads a "*<n>\r\n" or "$<n>\r\n" line and returns n; bad is
// the error for a malformed one.
func (r *reader) readHeader(bad error) (int64, error) {
	line, err := r.readLine(maxHeaderLen)
	if errors.Is(err, errInlineLen) {
		return 0, bad
	}
	if err != nil {
		return 0, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return 0, errCRLF
	}
	n, ok := parseInt(line[1 : len(line)-2])
	if !ok {
		return 0, bad
	}
	return n, nil
}

// readLine returns the next line, with its "\n", if it is at most max bytes
// long (without its line ending); errInlineLen otherwise. The line is valid
// until the next read.
func (r *reader) readLine(max int) ([]byte, error) {
	line, err := r.br.ReadSlice('\n')
	if err == nil {
		return checkLen(line, max)
	}
	r.line = append(r.line[:0], line...)
	for {
		if len(bytes.TrimSuffix(r.line, crlf[:1])) > max {
			return nil, errInlineLen
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, unexpected(err)
		}
		line, err = r.br.ReadSlice('\n')
		r.line = append(r.line, line...)
		if err == nil {
			return checkLen(r.line, max)
		}
	}
}

func checkLen(line []byte, max int) ([]byte, error) {
	if len(trimEOL(line)) > max {
		return nil, errInlineLen
	}
	return line, nil
}

// trimEOL removes a trailing "\n" or "\r\n".
func trimEOL(line []byte) []byte {
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line
}

// parseInt parses an optionally negative decimal of at most 18 digits, so
// that it cannot overflow.
func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// unexpected turns an end of input inside a request into
// io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
