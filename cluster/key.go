package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/oblivkv/oblivkv/seal"
)

// The store's master key: one file every process of the cluster reads
// (Config.Key), which seals what crosses between them, their raft logs
// and snapshots, and storage.

// ReadKeys reads the store's master key.
func ReadKeys(c *Config) (*seal.Keys, error) {
	master, err := seal.ReadKeyFile(c.Key)
	if errors.Is(err, seal.ErrNoKeyFile) {
		return nil, fmt.Errorf("cluster: %w (`oblivkv cluster certs` writes it)", err)
	}
	if err != nil {
		return nil, err
	}
	return seal.NewKeys(master)
}

// EnsureKey writes a fresh master key to Config.Key unless the file
// exists, and reports whether it wrote one.
func EnsureKey(c *Config) (bool, error) {
	if _, err := os.Stat(c.Key); err == nil {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(c.Key), 0o700); err != nil {
		return false, err
	}
	master, err := seal.GenerateMaster()
	if err != nil {
		return false, err
	}
	return true, seal.WriteKeyFile(c.Key, master)
}
