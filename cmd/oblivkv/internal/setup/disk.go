package setup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/disk"
	"github.com/oblivkv/oblivkv/backend/slots"
	"github.com/oblivkv/oblivkv/kv"
)

// The storage engines of the disk backend. A store keeps the engine it
// was made with; DiskEngine chooses a new store's.
const (
	// EngineAuto chooses by protocol: slots for a protocol that journals
	// every write (every oblivious one), pebble for the insecure
	// baselines, which write each value durably before answering.
	EngineAuto = "auto"
	// EngineSlots keeps values in files of equal-sized slots
	// (backend/slots): fastest where the journal makes each operation
	// durable and storage syncs at its checkpoints; a write durable on
	// its own costs an fsync of slots scattered over a file.
	EngineSlots = "slots"
	// EnginePebble keeps them in a pebble LSM database (backend/disk): a
	// write durable on its own costs an fsync of its sequential log. The
	// only engine of stores made before slots existed.
	EnginePebble = "pebble"
)

// DiskEngines are the engines Options.DiskEngine may name.
var DiskEngines = []string{EngineAuto, EngineSlots, EnginePebble}

// diskOptions are how a disk store is opened.
type diskOptions struct {
	engine    string // a new store's; "" is EngineSlots
	noSync    bool
	readOnly  bool
	cacheSize int64 // pebble's block cache
}

func (o Options) diskOptions() diskOptions {
	return diskOptions{engine: o.newEngine(), noSync: o.NoFsync, cacheSize: o.DiskCache}
}

// newEngine is the engine of a new store of o's protocol (EngineAuto).
func (o Options) newEngine() string {
	if o.DiskEngine != "" && o.DiskEngine != EngineAuto {
		return o.DiskEngine
	}
	if p, ok := kv.Lookup(cmp.Or(o.Protocol, DefaultProtocol)); ok && p.Insecure() {
		return EnginePebble
	}
	return EngineSlots
}

// StoreEngine returns the engine of the disk store in dir, found from its
// files, or "" if dir holds none.
func StoreEngine(dir string) (string, error) {
	for _, e := range []struct{ engine, marker string }{{EnginePebble, "CURRENT"}, {EngineSlots, "SYNCED"}} {
		if _, err := os.Stat(filepath.Join(dir, e.marker)); err == nil {
			return e.engine, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("setup: %w", err)
		}
	}
	return "", nil
}

// DiskStore is a disk store, on either engine.
type DiskStore interface {
	backend.Backend
	// Checkpoint writes a consistent copy of the store into dir, which
	// must not exist (a backup's snapshot).
	Checkpoint(ctx context.Context, dir string) error
}

// openDisk opens the disk store in dir on its own engine, or a new one on
// o.engine.
func openDisk(dir string, o diskOptions) (DiskStore, error) {
	engine, err := StoreEngine(dir)
	if err != nil {
		return nil, err
	}
	if engine == "" {
		engine = o.engine
	}
	switch engine {
	case EngineSlots, "":
		return opened(slots.Open(dir, slots.Options{NoSync: o.noSync, ReadOnly: o.readOnly}))
	case EnginePebble:
		return opened(disk.OpenWith(dir, disk.Options{NoSync: o.noSync, ReadOnly: o.readOnly, CacheSize: o.cacheSize}))
	}
	return nil, fmt.Errorf("setup: unknown disk engine %q (want %s or %s)", engine, EngineSlots, EnginePebble)
}

// opened returns an engine's open store as a DiskStore, and nil (not a
// nil pointer in the interface) with an error.
func opened[S DiskStore](s S, err error) (DiskStore, error) {
	if err != nil {
		return nil, err
	}
	return s, nil
}

// OpenDiskStore opens the disk store in dir (a data directory's, or a
// backup snapshot's) on its own engine, read-only or not.
func OpenDiskStore(dir string, readOnly bool) (DiskStore, error) {
	return openDisk(dir, diskOptions{readOnly: readOnly, cacheSize: ReadOnlyCacheSize})
}

// engineStats returns the figures of the disk engine b is, nil for any
// other backend.
func engineStats(b backend.Backend) func() []kv.Stat {
	switch b := b.(type) {
	case *disk.Backend:
		return func() []kv.Stat { return pebbleStats(b.Metrics()) }
	case *slots.Backend:
		return func() []kv.Stat { return slotStats(b.Metrics()) }
	}
	return nil
}

// pebbleStats names the pebble engine's figures as kv's statistics.
func pebbleStats(m disk.Metrics) []kv.Stat {
	return []kv.Stat{
		{Name: kv.StatDiskWriteAmplification, Value: m.WriteAmplification},
		{Name: kv.StatDiskCompactions, Value: float64(m.Compactions)},
		{Name: kv.StatDiskFlushes, Value: float64(m.Flushes)},
		{Name: kv.StatDiskWriteStalls, Value: float64(m.WriteStalls)},
		{Name: kv.StatDiskWriteStallSeconds, Value: m.WriteStallSeconds},
		{Name: kv.StatDiskL0Files, Value: float64(m.L0Files)},
		{Name: kv.StatDiskCacheHitRate, Value: m.CacheHitRate},
		{Name: kv.StatDiskCacheBytes, Value: float64(m.CacheBytes)},
		{Name: kv.StatDiskCacheCapacity, Value: float64(m.CacheCapacity)},
		{Name: kv.StatDiskWALBytes, Value: float64(m.WALBytes)},
		{Name: kv.StatDiskBytes, Value: float64(m.DiskBytes)},
	}
}

// slotStats names the slots engine's figures as kv's statistics.
func slotStats(m slots.Metrics) []kv.Stat {
	return []kv.Stat{
		{Name: kv.StatDiskBytes, Value: float64(m.Bytes)},
		{Name: kv.StatDiskSlotsUsed, Value: float64(m.SlotsUsed)},
		{Name: kv.StatDiskSlotsFree, Value: float64(m.SlotsFree)},
		{Name: kv.StatDiskSyncs, Value: float64(m.Syncs)},
	}
}
