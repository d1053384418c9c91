package backup

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/setup"
)

// A running server takes backups of its own store for `oblivkv backup`
// through a unix socket in its data directory (SocketFile), mode 0600 in
// a directory of mode 0700: only the store's owner (and root) reaches
// it, as only they can read the key file and the journal anyway, so the
// socket grants nobody anything new, and needs no password of its own. A
// RESP command would have put the archive within reach of every client
// the users file admits, and over the network. The server writes the
// archive into the connection, never to a path a client names: the
// client writes the file, as itself.
//
// The exchange: the client sends the line "backup"; the server answers
// "ok" and the archive, or "error: " and a message, each line ended by
// "\n". A stream cut short fails the client's check of the archive.

// SocketFile returns the path of a data directory's backup socket.
func SocketFile(dataDir string) string { return filepath.Join(dataDir, "backup.sock") }

const (
	request   = "backup\n"
	replyOK   = "ok\n"
	replyFail = "error: "
)

// requestTimeout bounds the wait for a client's request, so that a
// connection that sends nothing does not hold the server's shutdown.
const requestTimeout = 10 * time.Second

// Listener serves backups of a running store on its data directory's
// socket, one at a time.
type Listener struct {
	ln   net.Listener
	take func(ctx context.Context, w io.Writer) (Contents, error)
	log  *slog.Logger
	mu   sync.Mutex // one backup at a time
	wg   sync.WaitGroup
}

// Listen opens dataDir's backup socket, replacing one a server that
// died left (the caller holds the data directory's store, so no live
// server owns it), and serves each request with take, which writes an
// archive of the store to w.
func Listen(dataDir string, take func(ctx context.Context, w io.Writer) (Contents, error), log *slog.Logger) (*Listener, error) {
	path := SocketFile(dataDir)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("backup: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("backup: listening on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("backup: %w", err)
	}
	l := &Listener{ln: ln, take: take, log: log}
	l.wg.Add(1)
	go l.serve()
	return l, nil
}

func (l *Listener) serve() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return // closed
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer c.Close()
			l.answer(c)
		}()
	}
}

// answer serves one request on c.
func (l *Listener) answer(c net.Conn) {
	c.SetReadDeadline(time.Now().Add(requestTimeout))
	line, err := bufio.NewReader(io.LimitReader(c, int64(len(request)))).ReadString('\n')
	if err != nil || line != request {
		fmt.Fprintf(c, "%sexpected %q\n", replyFail, strings.TrimSpace(request))
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	w := &replyWriter{c: c}
	if _, err := l.take(context.Background(), w); err != nil {
		l.log.Error("backup failed", "err", err)
		if !w.started {
			fmt.Fprintf(c, "%s%s\n", replyFail, strings.ReplaceAll(err.Error(), "\n", " "))
		}
	}
}

// replyWriter sends "ok" before the archive's first bytes, so an error
// before any can still be reported as such.
type replyWriter struct {
	c       net.Conn
	started bool
}

func (w *replyWriter) Write(p []byte) (int, error) {
	if !w.started {
		w.started = true
		if _, err := io.WriteString(w.c, replyOK); err != nil {
			return 0, err
		}
	}
	return w.c.Write(p)
}

// Close stops serving, waits for a backup in progress, and removes the
// socket.
func (l *Listener) Close() error {
	err := l.ln.Close()
	l.wg.Wait()
	return err
}

// Fetch asks the server holding dataDir's store for an archive and writes
// it to path (WriteFile), checking it whole (Read) as it arrives. begun,
// if not nil, is called once the server has begun: its store is paused
// or was, so that no request sent from then on is in the archive.
func Fetch(ctx context.Context, dataDir, path string, begun func()) (Contents, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", SocketFile(dataDir))
	if err != nil {
		return Contents{}, fmt.Errorf("backup: a process holds the store in %s, and its server's backup socket does not answer (a server still starting, or a process other than oblivkv serve): %w", dataDir, err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, request); err != nil {
		return Contents{}, fmt.Errorf("backup: %w", err)
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	switch {
	case err != nil:
		return Contents{}, fmt.Errorf("backup: the server of %s closed the connection: %w", dataDir, err)
	case strings.HasPrefix(line, replyFail):
		return Contents{}, fmt.Errorf("backup: the server: %s", strings.TrimSpace(strings.TrimPrefix(line, replyFail)))
	case line != replyOK:
		return Contents{}, fmt.Errorf("backup: the server answered %q", line)
	}
	if begun != nil {
		begun()
	}
	keys, err := setup.LoadKeys(dataDir)
	if err != nil {
		return Contents{}, err
	}
	return WriteFile(path, func(w io.Writer) (Contents, error) {
		return Read(io.TeeReader(r, w), keys, Visitor{})
	})
}
