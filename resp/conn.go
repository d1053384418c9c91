package resp

import (
	"bufio"
	"errors"
	"io"
	"net"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oblivkv/oblivkv/auth"
)

const (
	bufSize = 16 << 10 // per-connection read and write buffers
	// After a protocol error the server stops writing, then reads and
	// drops up to lingerBytes for up to lingerTime before closing, so that
	// a client still sending gets the error reply rather than a reset.
	lingerBytes = 256 << 10
	lingerTime  = 250 * time.Millisecond
)

// Connection states, for Shutdown: only idle connections are closed at
// once; active ones finish their request first.
const (
	stateActive int32 = iota // running a request, or reading a pipelined one
	stateIdle                // waiting for a request
	stateClosed              // closed by Shutdown
)

// conn is one client connection.
type conn struct {
	s       *Server
	nc      net.Conn
	id      int64
	created time.Time
	state   atomic.Int32

	rd   *reader
	wr   *writer
	quit bool         // close after this reply
	low  [32]byte     // the command name, lowercased for the table
	mu   sync.Mutex   // guards name, read by other connections' CLIENT LIST
	name string       // set by CLIENT SETNAME
	last atomic.Int64 // unix nanoseconds of the last request

	// The connection's user, once authenticated (auth.go).
	user          auth.User
	authenticated bool
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, id: s.nextID.Add(1), created: time.Now()}
	c.last.Store(c.created.UnixNano())
	c.initAuth()
	return c
}

// serve runs the connection's requests one after the other until it ends.
func (c *conn) serve() {
	defer c.s.untrack(c)
	defer c.nc.Close()
	defer c.recoverPanic()
	c.wr = newWriter(bufio.NewWriterSize(c.nc, bufSize))
	// Replies are flushed whenever the reader must wait for the network:
	// a pipeline's replies leave in one write, and a client never waits
	// for a reply the server holds.
	src := flushingReader{c.nc, c.wr}
	c.rd = newReader(bufio.NewReaderSize(src, bufSize), c.s.opts.limits())
	for c.next() {
	}
}

// next reads and runs one request and reports whether to go on.
func (c *conn) next() bool {
	if c.rd.buffered() == 0 && !c.goIdle() {
		return false
	}
	if t := c.s.opts.IdleTimeout; t > 0 {
		c.nc.SetReadDeadline(time.Now().Add(t))
	}
	args, err := c.rd.readCommand()
	if err != nil {
		c.readFailed(err)
		return false
	}
	if !c.goActive() {
		return false
	}
	c.last.Store(time.Now().UnixNano())
	c.exec(args)
	if c.quit || c.s.closing.Load() {
		c.wr.flush()
		return false
	}
	return true
}

// goIdle marks the connection as waiting for a request, unless the server
// is shutting down. Shutdown sets closing before it looks for idle
// connections, so either it sees this one idle or this one sees closing.
func (c *conn) goIdle() bool {
	c.state.Store(stateIdle)
	return !c.s.closing.Load()
}

// goActive marks the connection as running a request, unless Shutdown has
// closed it meanwhile.
func (c *conn) goActive() bool {
	return c.state.Load() == stateActive || c.state.CompareAndSwap(stateIdle, stateActive)
}

// closeIfIdle closes the connection if it is waiting for a request.
func (c *conn) closeIfIdle() {
	if c.state.CompareAndSwap(stateIdle, stateClosed) {
		c.nc.Close()
	}
}

// readFailed ends the connection after a read error: a protocol error is
// answered first; the end of input or a network error is only logged.
func (c *conn) readFailed(err error) {
	var perr *protocolError
	switch {
	case errors.As(err, &perr):
		c.s.log.Debug("resp: protocol error; closing", "client", c.id, "err", perr.Error())
		c.wr.err("ERR " + perr.Error())
		if c.wr.flush() == nil {
			c.linger()
		}
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
	default:
		c.s.log.Debug("resp: read failed; closing", "client", c.id, "err", err)
	}
}

// linger half-closes the connection and drops what the client still
// sends, briefly, so that the error reply is read rather than reset.
func (c *conn) linger() {
	cw, ok := c.nc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	c.nc.SetReadDeadline(time.Now().Add(lingerTime))
	io.CopyN(io.Discard, c.nc, lingerBytes)
}

// recoverPanic is the last resort: a bug must not take the server down.
// Only runtime errors are logged in full; other panic values could carry
// user data.
func (c *conn) recoverPanic() {
	r := recover()
	if r == nil {
		return
	}
	what := "non-runtime panic"
	if rerr, ok := r.(runtime.Error); ok {
		what = rerr.Error()
	}
	c.s.log.Error("resp: panic serving a client; closing it", "client", c.id,
		"panic", what, "stack", string(debug.Stack()))
}

func (c *conn) setName(name string) {
	c.mu.Lock()
	c.name = name
	c.mu.Unlock()
}

func (c *conn) getName() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.name
}

// flushingReader flushes the pending replies before every read from the
// network.
type flushingReader struct {
	r io.Reader
	w *writer
}

func (f flushingReader) Read(p []byte) (int, error) {
	if f.w.bw.Buffered() > 0 {
		if err := f.w.flush(); err != nil {
			return 0, err
		}
	}
	return f.r.Read(p)
}
