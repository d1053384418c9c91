package mem_test

import (
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/backendtest"
	"github.com/oblivkv/oblivkv/backend/mem"
)

func TestConformance(t *testing.T) {
	open := func(t *testing.T) backend.Backend {
		b := mem.New()
		t.Cleanup(func() { b.Close() })
		return b
	}
	reopen := func(t *testing.T, old backend.Backend) backend.Backend {
		old.(*mem.Backend).Reopen()
		return old
	}
	backendtest.Run(t, open, backendtest.WithReopen(reopen))
}
