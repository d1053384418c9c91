package redistest

import (
	"errors"
	"os"
	"strconv"
	"sync"
	"testing"
)

// SharedDatabases is the number of logical databases of the shared server,
// and so the most tests that can hold a Shared lease at the same time.
const SharedDatabases = 64

var shared struct {
	once sync.Once
	dbs  chan int // database numbers not leased to a test

	mu  sync.Mutex // guards srv and err
	srv *server
	err error
}

// Shared returns the URL of a freshly flushed database on a redis-server
// shared by every test in this test binary, "redis://127.0.0.1:PORT/DB".
// The database belongs to t until t ends. The server starts on first use;
// stop it from TestMain with Main or StopShared.
func Shared(t testing.TB) (url string) {
	t.Helper()
	Require(t, "redis-server")
	srv, err := sharedServer()
	if err != nil {
		t.Fatalf("redistest: shared server: %v", err)
	}
	var db int
	select {
	case db = <-shared.dbs:
	default:
		t.Fatalf("redistest: all %d shared databases are leased by running tests", SharedDatabases)
	}
	t.Cleanup(func() { shared.dbs <- db })
	if err := srv.do([]string{"SELECT", strconv.Itoa(db)}, []string{"FLUSHDB"}); err != nil {
		t.Fatalf("redistest: flush database %d: %v", db, err)
	}
	return srv.url(db)
}

// sharedServer starts the shared server on first use.
func sharedServer() (*server, error) {
	shared.once.Do(func() {
		shared.dbs = make(chan int, SharedDatabases)
		for db := range SharedDatabases {
			shared.dbs <- db
		}
		shared.mu.Lock()
		defer shared.mu.Unlock()
		shared.srv, shared.err = startShared()
	})
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv == nil && shared.err == nil {
		return nil, errors.New("already stopped by StopShared")
	}
	return shared.srv, shared.err
}

func startShared() (*server, error) {
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, err
	}
	srv, err := start(dir, options{databases: SharedDatabases})
	if err != nil {
		os.RemoveAll(dir)
	}
	return srv, err
}

// StopShared stops the shared server, if one was started, and removes its
// directory. Call it after m.Run in TestMain, or use Main.
func StopShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv != nil {
		shared.srv.stop()
		os.RemoveAll(shared.srv.dir)
		shared.srv = nil
	}
}

// Main runs the tests, stops the shared server and exits. Use it as
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	StopShared()
	os.Exit(code)
}
