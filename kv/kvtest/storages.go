package kvtest

import (
	"context"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/redis"
	"github.com/oblivkv/oblivkv/backend/slots"
	"github.com/oblivkv/oblivkv/internal/testsupport/redistest"
)

// Storages returns every storage the kits run on: mem, disk and redis (a
// leased database of a redis-server shared by the test binary; see Main).
// A protocol's contract test ranges over it, so a new backend reaches every
// protocol by one line here.
func Storages(t *testing.T) []Storage {
	t.Helper()
	return []Storage{Mem(), Disk(), Redis()}
}

// Main runs a test binary's tests and then stops the redis-server that
// Redis storage may have started. Every package whose tests use Redis (or
// Storages) should have
//
//	func TestMain(m *testing.M) { kvtest.Main(m) }
//
// Without it the server is still killed when the test process exits, but
// its temporary directory is left behind.
func Main(m *testing.M) { redistest.Main(m) }

// Redis is storage in a freshly flushed database of a redis-server shared
// by the test binary (internal/testsupport/redistest), reopened by connecting again.
// Without redis-server installed the test fails, unless
// OBLIVKV_SKIP_REDIS=1 makes it skip.
func Redis() Storage {
	return Storage{Name: "redis", New: func(t *testing.T) func() (backend.Backend, error) {
		url := redistest.Shared(t)
		return func() (backend.Backend, error) {
			return redis.Open(context.Background(), url)
		}
	}}
}

// Disk is storage in a fresh directory of the disk backend's engine for
// the oblivious protocols (backend/slots), reopened by opening the
// directory again. It
// runs without fsync per write (a clean Close still makes everything
// durable), since the kits test semantics, not crash durability.
func Disk() Storage {
	return Storage{Name: "disk", New: func(t *testing.T) func() (backend.Backend, error) {
		dir := t.TempDir()
		return func() (backend.Backend, error) {
			return slots.Open(dir, slots.Options{NoSync: true})
		}
	}}
}
