package resp

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oblivkv/oblivkv/kv"
)

// ErrServerClosed is returned by Serve and ListenAndServe after Shutdown.
var ErrServerClosed = errors.New("resp: server closed")

// Server serves one kv.Store over RESP2. It does not own the store: close
// the store after Shutdown returns.
type Server struct {
	store kv.Store
	opts  Options
	log   *slog.Logger
	start time.Time

	// ctx is the context of every store call; cancelled when Shutdown
	// gives up waiting.
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	closing   atomic.Bool // set under mu, read without it
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	wg        sync.WaitGroup // one per connection goroutine

	nextID                      atomic.Int64
	connsTotal, rejected, cmdsN atomic.Uint64
}

// NewServer returns a server of store; opts' zero fields take defaults.
func NewServer(store kv.Store, opts Options) *Server {
	opts = opts.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{store: store, opts: opts, log: opts.Logger, start: time.Now(),
		ctx: ctx, cancel: cancel,
		listeners: map[net.Listener]struct{}{}, conns: map[*conn]struct{}{}}
}

// ListenAndServe listens on the TCP address addr and serves it.
func (s *Server) ListenAndServe(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.Serve(ln)
}

// Serve accepts connections on ln and serves each in its own goroutine
// until Shutdown, when it returns ErrServerClosed. It closes ln.
func (s *Server) Serve(ln net.Listener) error {
	if !s.addListener(ln) {
		ln.Close()
		return ErrServerClosed
	}
	defer s.removeListener(ln)
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return ErrServerClosed
			}
			if backoff = nextBackoff(backoff); !temporary(err) {
				return err
			}
			s.log.Warn("resp: accept failed; retrying", "err", err, "in", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		s.accept(nc)
	}
}

func temporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

func nextBackoff(d time.Duration) time.Duration {
	return min(max(2*d, 5*time.Millisecond), time.Second)
}

func (s *Server) addListener(ln net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return false
	}
	s.listeners[ln] = struct{}{}
	return true
}

func (s *Server) removeListener(ln net.Listener) {
	s.mu.Lock()
	delete(s.listeners, ln)
	s.mu.Unlock()
	ln.Close()
}

// accept registers nc and starts serving it, or refuses it.
func (s *Server) accept(nc net.Conn) {
	s.connsTotal.Add(1)
	c := newConn(s, nc)
	switch s.track(c) {
	case tracked:
		go c.serve()
	case tooMany:
		s.rejected.Add(1)
		nc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		nc.Write([]byte("-ERR max number of clients reached\r\n"))
		nc.Close()
	default:
		nc.Close()
	}
}

type trackResult int

const (
	tracked trackResult = iota
	tooMany
	shuttingDown
)

func (s *Server) track(c *conn) trackResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closing.Load():
		return shuttingDown
	case len(s.conns) >= s.opts.MaxClients:
		return tooMany
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return tracked
}

func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}

// clients returns the connections being served.
func (s *Server) clients() []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		cs = append(cs, c)
	}
	return cs
}

// Shutdown stops accepting connections, closes those waiting for a
// request, and waits for the others to finish the request they are running
// (requests a client pipelined behind it are not run). If ctx ends first,
// it closes every connection, cancels the store calls in flight and returns
// ctx's error without waiting further. The store is left open.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing.Store(true)
	for ln := range s.listeners {
		ln.Close()
	}
	s.mu.Unlock()
	for _, c := range s.clients() {
		c.closeIfIdle()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.cancel()
		for _, c := range s.clients() {
			c.nc.Close()
		}
		return ctx.Err()
	}
}
