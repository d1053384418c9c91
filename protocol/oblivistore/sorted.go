package oblivistore

import (
	"bytes"
	"cmp"
	"encoding/gob"
	"maps"
	"slices"
)

// sorted is a map that gob encodes in key order, so that two machines in
// the same state take byte-identical snapshots (gob encodes a plain map
// in Go's random iteration order).
type sorted[K cmp.Ordered, V any] map[K]V

// sortedPairs is a sorted map's encoding: its keys in order, and their
// values.
type sortedPairs[K cmp.Ordered, V any] struct {
	Keys []K
	Vals []V
}

// GobEncode implements gob.GobEncoder.
func (m sorted[K, V]) GobEncode() ([]byte, error) {
	p := sortedPairs[K, V]{Keys: slices.Sorted(maps.Keys(m))}
	p.Vals = make([]V, len(p.Keys))
	for i, k := range p.Keys {
		p.Vals[i] = m[k]
	}
	var buf bytes.Buffer
	err := gob.NewEncoder(&buf).Encode(p)
	return buf.Bytes(), err
}

// GobDecode implements gob.GobDecoder.
func (m *sorted[K, V]) GobDecode(b []byte) error {
	var p sortedPairs[K, V]
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&p); err != nil {
		return err
	}
	*m = make(sorted[K, V], len(p.Keys))
	for i, k := range p.Keys {
		if i < len(p.Vals) {
			(*m)[k] = p.Vals[i]
		}
	}
	return nil
}
