package backend

import (
	"encoding/binary"
	"fmt"
)

// VersionedItem is one item of a conditional write: Value is stored at Addr
// only if Version is newer than the version stored there.
type VersionedItem struct {
	Addr    string
	Version uint64
	Value   []byte
}

// VersionSize is the number of bytes the version takes in front of a value
// stored by WriteVersioned.
const VersionSize = 8

// MaxVersion is the largest version a backend must honour: versions are
// compared as exact integers by every backend, including Redis's Lua, whose
// numbers are doubles.
const MaxVersion = 1<<53 - 1

// EncodeVersioned returns the stored form of a versioned value: the version
// (8 bytes, big-endian) followed by the value.
func EncodeVersioned(version uint64, value []byte) []byte {
	out := make([]byte, VersionSize, VersionSize+len(value))
	binary.BigEndian.PutUint64(out, version)
	return append(out, value...)
}

// SplitVersioned splits what Read returns for an address written by
// WriteVersioned into its version and value.
func SplitVersioned(stored []byte) (version uint64, value []byte, err error) {
	if len(stored) < VersionSize {
		return 0, nil, fmt.Errorf("backend: versioned value of %d bytes is shorter than its version", len(stored))
	}
	return binary.BigEndian.Uint64(stored), stored[VersionSize:], nil
}

// StoredVersion returns the version of a stored versioned value; a missing
// or malformed value has version 0, so any write supersedes it.
func StoredVersion(stored []byte) uint64 {
	if len(stored) < VersionSize {
		return 0
	}
	return binary.BigEndian.Uint64(stored)
}

// CheckVersions rejects versions outside [1, MaxVersion].
func CheckVersions(items []VersionedItem) error {
	for _, it := range items {
		if it.Version == 0 || it.Version > MaxVersion {
			return fmt.Errorf("backend: version %d of a versioned write is outside [1, 2^53)", it.Version)
		}
	}
	return nil
}

// ApplyVersioned decides a versioned batch against the current stored
// versions: it returns the items to store (encoded) and how many were
// stale. current(addr) returns the stored version; later items of the
// batch see earlier ones. It is the rule the mem and disk backends share.
func ApplyVersioned(items []VersionedItem, current func(addr string) (uint64, error)) ([]Item, int, error) {
	newest := map[string]uint64{}
	var out []Item
	stale := 0
	for _, it := range items {
		cur, seen := newest[it.Addr]
		if !seen {
			var err error
			if cur, err = current(it.Addr); err != nil {
				return nil, 0, err
			}
		}
		if it.Version <= cur {
			stale++
			newest[it.Addr] = cur
			continue
		}
		newest[it.Addr] = it.Version
		out = append(out, Item{Addr: it.Addr, Value: EncodeVersioned(it.Version, it.Value)})
	}
	return out, stale, nil
}
