package disk_test

import (
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/backendtest"
	"github.com/oblivkv/oblivkv/backend/disk"
)

func TestConformance(t *testing.T) {
	backendtest.Run(t, openIn, backendtest.WithReopen(reopen))
}

// opened remembers the directory of a test backend, so it can be reopened.
type opened struct {
	*disk.Backend
	dir string
}

func openIn(t *testing.T) backend.Backend { return openDir(t, t.TempDir()) }

func reopen(t *testing.T, old backend.Backend) backend.Backend {
	return openDir(t, old.(opened).dir)
}

func openDir(t *testing.T, dir string) backend.Backend {
	t.Helper()
	b, err := disk.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return opened{b, dir}
}
