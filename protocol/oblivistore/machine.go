package oblivistore

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"math/rand/v2"

	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/random"
)

// Machine is one of ObliviStore's deterministic state machines, the unit
// a log drives (in one process the journal, in a cluster a Raft group):
// the Front (FrontMachine) or a partition group (GroupMachine). Its
// outputs are a function of its snapshot and the entries applied since:
// it never calls a backend, reads a clock or spawns anything, and its
// random sources, duplicate tables, pending writes and in-flight reads
// are all in its state. Storage calls are outputs; their results come
// back as entries.
type Machine[E, O any] interface {
	// Apply applies one entry and returns the outputs it causes, valid
	// until the next call. An error leaves the machine unusable: storage
	// was tampered with, or an invariant broke.
	Apply(entry E) ([]O, error)
	durable.Snapshotter
	// Restore replaces the machine's state by a snapshot.
	Restore(snapshot []byte) error
}

var (
	_ Machine[FrontEntry, FrontOutput] = (*FrontMachine)(nil)
	_ Machine[GroupEntry, GroupOutput] = (*GroupMachine)(nil)
)

// Reseed mixes fresh randomness into a machine's sources and tells it
// its incarnation, which names its messages from then on. The driver
// journals one at every open, so work lost in a crash is never redone
// with the same random choices.
type Reseed struct {
	Seed        [32]byte
	Incarnation uint64
}

// source is a machine's random source: the ChaCha8 whose state
// snapshots carry, and the rand.Rand drawing from it.
type source struct {
	src *rand.ChaCha8
	*rand.Rand
}

func newSource(seed [32]byte, label string) source {
	src := random.Labeled(seed, label)
	return source{src, rand.New(src)}
}

// reseed mixes seed into the source, under label.
func (s *source) reseed(seed [32]byte, label string) {
	var mixed [32]byte
	s.src.Read(mixed[:])
	for i := range mixed {
		mixed[i] ^= seed[i]
	}
	*s = newSource(mixed, label)
}

func (s source) marshal() ([]byte, error) { return s.src.MarshalBinary() }

func restoreSource(state []byte) (source, error) {
	src, err := random.Restore(state)
	if err != nil {
		return source{}, fmt.Errorf("oblivistore: decoding a random source: %w", err)
	}
	return source{src, rand.New(src)}, nil
}

// encodeState and decodeState are a machine's snapshot encoding. Every
// map in a state is a sorted one, so equal states encode byte-identical.
func encodeState(st any) ([]byte, error) {
	var buf bytes.Buffer
	err := gob.NewEncoder(&buf).Encode(st)
	return buf.Bytes(), err
}

func decodeState(b []byte, st any) error {
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(st); err != nil {
		return fmt.Errorf("oblivistore: decoding the state: %w", err)
	}
	return nil
}
