package raftgroup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/hashicorp/raft"

	"github.com/oblivkv/oblivkv/backend/disk"
	"github.com/oblivkv/oblivkv/internal/durable/delta"
	"github.com/oblivkv/oblivkv/seal"
)

// logStore is raft's LogStore and StableStore in one pebble database: log
// entries sealed under the store key and bound to their index, so storage
// of the replica's disk shows their sizes and count, never their content,
// and an entry moved to another index fails to open. The stable store
// (the current term and the vote) is raft's own bookkeeping, kept plain.
type logStore struct {
	db   *pebble.DB
	keys *seal.Keys

	mu          sync.Mutex // guards first and last
	first, last uint64     // 0 when the log is empty
}

const (
	logPrefix    = 'l'
	stablePrefix = 's'
	logKeySize   = 9
)

// openLogStore opens or creates the log store in dir.
func openLogStore(dir string, keys *seal.Keys) (*logStore, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: disk.QuietLogger{}})
	if err != nil {
		return nil, fmt.Errorf("raftgroup: log store %s: %w", dir, err)
	}
	s := &logStore{db: db, keys: keys}
	if s.first, s.last, err = s.bounds(); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// bounds reads the first and last index stored.
func (s *logStore) bounds() (first, last uint64, err error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: logKey(0), UpperBound: []byte{logPrefix + 1}})
	if err != nil {
		return 0, 0, err
	}
	defer it.Close()
	if it.First() {
		first = binary.BigEndian.Uint64(it.Key()[1:])
	}
	if it.Last() {
		last = binary.BigEndian.Uint64(it.Key()[1:])
	}
	return first, last, it.Error()
}

func logKey(index uint64) []byte {
	k := make([]byte, logKeySize)
	k[0] = logPrefix
	binary.BigEndian.PutUint64(k[1:], index)
	return k
}

// logAD binds a sealed entry to its index.
func logAD(index uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte("oblivkv raft log entry "), index)
}

// FirstIndex implements raft.LogStore.
func (s *logStore) FirstIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first, nil
}

// LastIndex implements raft.LogStore.
func (s *logStore) LastIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, nil
}

// GetLog implements raft.LogStore.
func (s *logStore) GetLog(index uint64, l *raft.Log) error {
	sealed, closer, err := s.db.Get(logKey(index))
	if errors.Is(err, pebble.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return err
	}
	defer closer.Close()
	plain, err := s.keys.Open(nil, logAD(index), sealed)
	if err != nil {
		return fmt.Errorf("raftgroup: log entry %d does not open under this store's key: %w", index, err)
	}
	return decodeLog(plain, index, l)
}

// StoreLog implements raft.LogStore.
func (s *logStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs implements raft.LogStore: one synced batch.
func (s *logStore) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	for _, l := range logs {
		if err := b.Set(logKey(l.Index), s.keys.Seal(nil, logAD(l.Index), encodeLog(l)), nil); err != nil {
			return err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("raftgroup: storing log entries: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first == 0 || logs[0].Index < s.first {
		s.first = logs[0].Index
	}
	s.last = max(s.last, logs[len(logs)-1].Index)
	return nil
}

// DeleteRange implements raft.LogStore: entries min to max, inclusive.
func (s *logStore) DeleteRange(lo, hi uint64) error {
	if err := s.db.DeleteRange(logKey(lo), logKey(hi+1), pebble.Sync); err != nil {
		return fmt.Errorf("raftgroup: deleting log entries %d-%d: %w", lo, hi, err)
	}
	first, last, err := s.bounds()
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.first, s.last = first, last
	s.mu.Unlock()
	return nil
}

func stableKey(key []byte) []byte { return append([]byte{stablePrefix}, key...) }

// Set implements raft.StableStore.
func (s *logStore) Set(key, val []byte) error {
	return s.db.Set(stableKey(key), val, pebble.Sync)
}

// Get implements raft.StableStore: an empty value for a missing key.
func (s *logStore) Get(key []byte) ([]byte, error) {
	v, closer, err := s.db.Get(stableKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return []byte{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return append([]byte{}, v...), nil
}

// SetUint64 implements raft.StableStore.
func (s *logStore) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 implements raft.StableStore: 0 for a missing key.
func (s *logStore) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil || len(v) == 0 {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("raftgroup: stable value %q of %d bytes, want 8", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// Close closes the database.
func (s *logStore) Close() error { return s.db.Close() }

// encodeLog encodes an entry with delta's framing: term, type,
// appended-at (Unix nanoseconds, as a uvarint of its two's complement),
// then data and extensions, each length-prefixed. The index is the key's.
func encodeLog(l *raft.Log) []byte {
	b := make([]byte, 0, 32+len(l.Data)+len(l.Extensions))
	b = binary.AppendUvarint(b, l.Term)
	b = append(b, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	b = binary.AppendUvarint(b, uint64(at))
	b = delta.AppendBytes(b, l.Data)
	return delta.AppendBytes(b, l.Extensions)
}

// decodeLog decodes encodeLog's bytes into l, refusing short or trailing
// input.
func decodeLog(b []byte, index uint64, l *raft.Log) error {
	d := delta.NewDecoder(b)
	term, typ, at := d.Uvarint(), d.Byte(), int64(d.Uvarint())
	data, ext := d.Bytes(math.MaxInt), d.Bytes(math.MaxInt)
	if err := d.Done(); err != nil {
		return fmt.Errorf("raftgroup: log entry %d: %w", index, err)
	}
	*l = raft.Log{Index: index, Term: term, Type: raft.LogType(typ), Data: data, Extensions: ext}
	if at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	return nil
}
