package disk_test

import (
	"testing"

	"github.com/oblivkv/oblivkv/backend/backendtest"
	"github.com/oblivkv/oblivkv/backend/disk"
)

// BenchmarkFenced measures what fencing costs per write on disk
// (backendtest.BenchFenced), with per-write fsync deferred as it is for a
// store that journals its writes (backend.DeferSync):
//
//	go test -run '^$' -bench Fenced -benchtime 2s ./backend/disk
func BenchmarkFenced(b *testing.B) {
	bk, err := disk.OpenWith(b.TempDir(), disk.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer bk.Close()
	backendtest.BenchFenced(b, bk)
}
