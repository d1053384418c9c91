// Package setup turns deployment settings (backend spec, data directory,
// key file, emulated latency, tap file) into an open kv.Store. It is shared
// by `oblivkv serve`, `oblivkv load` and `oblivkv bench`.
//
// A protocol's options arrive as --opt NAME=VALUE settings, which package
// kv/options turns into its Options; setup reconciles them with those a
// store recorded. It imports no protocol package.
//
// It owns the data directory layout (DIR/key, the 0600 master key file,
// DIR/store, the embedded backend's files, and a restore's DIR/restored
// and DIR/restoring, see restored.go) and the rule that a key is only
// ever created for storage that holds no store: a missing or wrong key for
// existing data is a startup error, never a silent re-initialisation, and
// so is a store whose rekey is unfinished (DIR/rekey: see package rekey).
// It must never print or log key material.
package setup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/backend/redis"
	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/rekey"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/options"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/seal"
)

// DefaultProtocol is the protocol of a new store when none is named.
const DefaultProtocol = "treebeard"

// Options are the deployment settings of one store.
type Options struct {
	// Protocol names a registered protocol; empty means the existing
	// store's protocol, or DefaultProtocol for a new store. Capacity and
	// ValueSize likewise default to the existing store's parameters.
	Protocol string
	// Backend is "mem", "disk", "redis://HOST:PORT[/DB]" or a rediss://
	// URL (see backend/redis.Open).
	Backend string
	// DataDir holds the key file and, for "disk", the store itself.
	DataDir string
	// BackendLatency is added to every backend round trip (WAN emulation).
	BackendLatency time.Duration
	// TapFile, if set, receives the full adversary-view log.
	TapFile string
	// Capacity, ValueSize and ProtocolOptions go to kv.Config.
	Capacity        int
	ValueSize       int
	ProtocolOptions any
	// OptionArgs are "name=value" settings of the protocol's Options (see
	// ProtocolOptions), resolved once the protocol is known (named, the
	// existing store's, or DefaultProtocol). Give this or ProtocolOptions,
	// not both. A new store records its options (kv.Config.OptionSettings);
	// an existing one that recorded them opens with them, and an option
	// given that differs from the recorded one is refused (kv.ErrMismatch)
	// before anything is written.
	OptionArgs []string
	// Prefix, if set, puts every address under this prefix (see
	// backend.WithPrefix), so a run can share storage with other data.
	Prefix string
	// EphemeralKey uses a fresh key that is never written to disk: for
	// benchmarks and tests whose data is thrown away.
	EphemeralKey bool
	// NoFsync is the --fsync none policy: the journal and the disk
	// backend write without fsync, so a power loss may lose the last
	// moments (a process crash loses nothing acknowledged).
	NoFsync bool
	// DiskCache is the disk backend's block cache in bytes (0:
	// disk.DefaultCacheSize), for a store on the pebble engine.
	DiskCache int64
	// DiskEngine is the storage engine of a new disk store: EngineAuto
	// (the default, also for ""), EngineSlots or EnginePebble. An
	// existing store keeps the engine it was made with.
	DiskEngine string

	engineStats func() []kv.Stat // the disk backend's figures, set by Open
}

// Opened is an open store and what must be released with it.
type Opened struct {
	Store   kv.Store
	KeyFile string // "" when the key is ephemeral or from the environment
	Fresh   bool   // the store was created by this Open
	// Settings are the store's protocol options (see Settings): the
	// recorded ones, or for a store of an older build the ones given.
	Settings map[string]string
	// Restored is the backup the store was restored from (nil: never).
	Restored *kv.Restore
	opts     Options
	tapLog   *observe.FileLog
}

// KeyFile returns the key file path of a data directory.
func KeyFile(dataDir string) string { return filepath.Join(dataDir, "key") }

// JournalDir returns the journal directory of a data directory, where a
// store keeps its trusted state (internal/durable/journal).
func JournalDir(dataDir string) string { return filepath.Join(dataDir, "journal") }

// Open opens the backend and the store described by opts. A protocol
// named but not registered is refused before anything is created.
func Open(ctx context.Context, opts Options) (*Opened, error) {
	if opts.Protocol != "" && !slices.Contains(kv.Protocols(), opts.Protocol) {
		return nil, fmt.Errorf("%w %q (known: %v)", kv.ErrUnknownProtocol, opts.Protocol, kv.Protocols())
	}
	if err := checkNotRestoring(opts.DataDir); err != nil {
		return nil, err
	}
	if err := unfinishedRekey(opts); err != nil {
		return nil, err
	}
	raw, err := openBackend(ctx, opts.Backend, opts.DataDir, opts.diskOptions())
	if err != nil {
		return nil, err
	}
	b := backend.WithLatency(backend.WithPrefix(raw, opts.Prefix), opts.BackendLatency)
	opts.engineStats = engineStats(raw)
	o, err := openStore(ctx, b, opts)
	if err != nil {
		b.Close()
		return nil, err
	}
	return o, nil
}

func openStore(ctx context.Context, b backend.Backend, opts Options) (*Opened, error) {
	exists, err := kv.Probe(ctx, b)
	if err != nil {
		return nil, err
	}
	o := &Opened{opts: opts, Fresh: !exists}
	if !exists { // settle the options before a key file is written
		if opts, err = resolve(opts); err != nil {
			return nil, err
		}
		o.Settings = options.Settings(opts.ProtocolOptions)
	}
	keys, err := o.loadKeys(exists)
	if err != nil {
		return nil, err
	}
	if exists {
		if opts, err = o.withStored(ctx, b, keys, opts); err != nil {
			return nil, err
		}
	}
	cfg := kv.Config{Protocol: opts.Protocol, Backend: b, Keys: keys, Capacity: opts.Capacity,
		ValueSize: opts.ValueSize, Options: opts.ProtocolOptions, OptionSettings: o.Settings, NoFsync: opts.NoFsync,
		EngineStats: opts.engineStats}
	if opts.TapFile != "" {
		if o.tapLog, err = observe.CreateFileLog(opts.TapFile); err != nil {
			return nil, err
		}
		cfg.TapLog = o.tapLog
	}
	if opts.Backend != "mem" && opts.DataDir != "" {
		if err := makeDataDir(opts.DataDir); err != nil {
			return nil, err
		}
		// The one place a store's journal gets its engine: files, and a
		// pebble store of checkpoints.
		cfg.OpenJournal = journal.Opener(JournalDir(opts.DataDir), journal.Options{NoSync: opts.NoFsync})
	}
	if o.Store, err = kv.Open(ctx, cfg); err != nil {
		if o.tapLog != nil {
			o.tapLog.Close()
		}
		return nil, o.nameKeyFile(err)
	}
	return o, nil
}

// nameKeyFile adds the key file to a kv.ErrWrongKey error, so the operator
// knows which file does not fit.
func (o *Opened) nameKeyFile(err error) error {
	if errors.Is(err, kv.ErrWrongKey) && o.KeyFile != "" {
		return fmt.Errorf("%w (key file %s)", err, o.KeyFile)
	}
	return err
}

// resolve names the protocol (DefaultProtocol if none) and turns
// OptionArgs into its ProtocolOptions.
func resolve(opts Options) (Options, error) {
	opts.Protocol = cmp.Or(opts.Protocol, DefaultProtocol)
	if len(opts.OptionArgs) == 0 {
		return opts, nil
	}
	if opts.ProtocolOptions != nil {
		return opts, errors.New("setup: give ProtocolOptions or OptionArgs, not both")
	}
	var err error
	opts.ProtocolOptions, err = options.Parse(opts.Protocol, opts.OptionArgs)
	opts.OptionArgs = nil
	return opts, err
}

// withStored fills the options left unset (empty protocol, zero sizes,
// protocol options) from those the existing store was created with, so a
// restart needs no flags repeated. Protocol options given that differ from
// the recorded ones are left in place for kv.Open to refuse.
func (o *Opened) withStored(ctx context.Context, b backend.Backend, keys *seal.Keys, opts Options) (Options, error) {
	stored, _, err := kv.Describe(ctx, b, keys)
	if err != nil {
		return opts, o.nameKeyFile(err)
	}
	if err := checkRestored(ctx, b, keys, opts, stored.Restored); err != nil {
		return opts, err
	}
	o.Restored = stored.Restored
	opts.Protocol = cmp.Or(opts.Protocol, stored.Protocol)
	opts.Capacity = cmp.Or(opts.Capacity, stored.Capacity)
	opts.ValueSize = cmp.Or(opts.ValueSize, stored.ValueSize)
	given := opts.OptionArgs
	if opts, err = resolve(opts); err != nil {
		return opts, err
	}
	o.Settings = options.Settings(opts.ProtocolOptions)
	// A store of an older build recorded no options: each start gives its
	// own, as then. Another protocol: kv.Open refuses it.
	if stored.OptionSettings == nil || opts.Protocol != stored.Protocol {
		return opts, nil
	}
	o.Settings = overRecorded(stored.OptionSettings, opts.Protocol, given, o.Settings)
	opts.ProtocolOptions, err = options.Parse(opts.Protocol, options.Args(o.Settings))
	return opts, err
}

// overRecorded returns the recorded settings with the options given in
// their place: those args name (an option named but at its default drops
// the recorded value) and those in settings (the Settings of the options
// given). kv.Open refuses the result where it differs from the record.
func overRecorded(recorded map[string]string, protocol string, args []string, settings map[string]string) map[string]string {
	out := maps.Clone(recorded)
	for _, arg := range args {
		name, _, _ := strings.Cut(arg, "=") // resolve checked them
		field, _ := options.FieldName(protocol, strings.TrimSpace(name))
		delete(out, field)
	}
	maps.Copy(out, settings)
	return out
}

// loadKeys finds the master key: $OBLIVKV_KEY, else the key file, else (for
// storage holding no store) a new key written to a new key file.
func (o *Opened) loadKeys(exists bool) (*seal.Keys, error) {
	master, err := o.master(exists)
	if err != nil {
		return nil, err
	}
	return seal.NewKeys(master)
}

func (o *Opened) master(exists bool) ([]byte, error) {
	if v := os.Getenv(seal.KeyEnv); v != "" {
		return seal.ParseKey(v, "$"+seal.KeyEnv)
	}
	if o.opts.EphemeralKey || o.opts.Backend == "mem" {
		if exists {
			return nil, errors.New("setup: storage already holds a store, and an ephemeral key cannot open it")
		}
		return seal.GenerateMaster()
	}
	o.KeyFile = KeyFile(o.opts.DataDir)
	master, err := seal.ReadKeyFile(o.KeyFile)
	if !errors.Is(err, seal.ErrNoKeyFile) {
		return master, err
	}
	if exists {
		return nil, fmt.Errorf("setup: the storage holds a store but its key file %s is missing; restore it (or set $%s)", o.KeyFile, seal.KeyEnv)
	}
	if master, err = seal.GenerateMaster(); err != nil {
		return nil, err
	}
	if err := makeDataDir(o.opts.DataDir); err != nil {
		return nil, err
	}
	return master, seal.WriteKeyFile(o.KeyFile, master)
}

// unfinishedRekey refuses a store whose rekey a crash cut short
// (rekey.Unfinished): it opens under neither key until rekey finishes.
func unfinishedRekey(opts Options) error {
	if opts.Backend == "mem" || opts.DataDir == "" {
		return nil
	}
	return rekey.Unfinished(opts.DataDir)
}

// LoadKeys returns the keys of an existing store of dataDir: from
// $OBLIVKV_KEY, else its key file, which must exist. It creates nothing,
// and refuses a store whose rekey is unfinished, which opens under
// neither key.
func LoadKeys(dataDir string) (*seal.Keys, error) {
	if err := rekey.Unfinished(dataDir); err != nil {
		return nil, err
	}
	master, err := existingMaster(dataDir)
	if err != nil {
		return nil, err
	}
	return seal.NewKeys(master)
}

func existingMaster(dataDir string) ([]byte, error) {
	if v := os.Getenv(seal.KeyEnv); v != "" {
		return seal.ParseKey(v, "$"+seal.KeyEnv)
	}
	master, err := seal.ReadKeyFile(KeyFile(dataDir))
	if errors.Is(err, seal.ErrNoKeyFile) {
		return nil, fmt.Errorf("setup: the store's key is needed: put its key file at %s (or set $%s)", KeyFile(dataDir), seal.KeyEnv)
	}
	return master, err
}

// OpenBackendReadOnly opens the storage named by spec for reading only:
// the disk backend read-only (it must exist), any other as OpenBackend.
// The disk backend gets a small block cache (ReadOnlyCacheSize).
func OpenBackendReadOnly(ctx context.Context, spec, dataDir string) (backend.Backend, error) {
	return openBackend(ctx, spec, dataDir, diskOptions{readOnly: true, cacheSize: ReadOnlyCacheSize})
}

// ReadOnlyCacheSize is the block cache of a disk backend opened to be
// read (a description, or a backup's single pass over every address,
// which reads nothing twice): a 2^16 x 1 KiB treebeard store was copied
// in 7.7 s with 4 MiB, and in 27 s with 64 MiB (the default then), whose
// evictions (pebble's CLOCK-Pro) took most of the time.
const ReadOnlyCacheSize = 4 << 20

// makeDataDir creates a data directory, readable by its owner only.
func makeDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("setup: creating data dir: %w", err)
	}
	return nil
}

// Description is what an existing store records about itself (see
// Describe), and the space it takes in its data directory.
type Description struct {
	Protocol   string
	Capacity   int
	ValueSize  int
	MaxKeySize int
	// Settings are its protocol options (see Settings); nil when it was
	// created by an older build, which did not record them.
	Settings map[string]string
	// Restored is the backup the store was restored from (nil: never).
	Restored *kv.Restore
	// StoreBytes and JournalBytes are the sizes of DIR/store (the disk
	// backend's files; 0 for another backend) and DIR/journal.
	StoreBytes, JournalBytes int64
}

// Describe reads what the store in the storage of opts (Backend, DataDir,
// Prefix) records about itself, without opening its protocol and without
// writing anything: the disk backend is opened read-only, and the key is
// only read. Storage holding no store is an error.
func Describe(ctx context.Context, opts Options) (Description, error) {
	if opts.Backend == "mem" {
		return Description{}, errors.New("setup: the mem backend keeps no store between runs")
	}
	if err := unfinishedRekey(opts); err != nil {
		return Description{}, err
	}
	raw, err := OpenBackendReadOnly(ctx, opts.Backend, opts.DataDir)
	if err != nil {
		return Description{}, err
	}
	defer raw.Close()
	b := backend.WithPrefix(raw, opts.Prefix)
	if exists, err := kv.Probe(ctx, b); err != nil || !exists {
		return Description{}, cmp.Or(err, fmt.Errorf("setup: no store in %s", cmp.Or(opts.Prefix, opts.DataDir)))
	}
	o := &Opened{opts: opts}
	keys, err := o.loadKeys(true)
	if err != nil {
		return Description{}, err
	}
	stored, _, err := kv.Describe(ctx, b, keys)
	if err != nil {
		return Description{}, o.nameKeyFile(err)
	}
	d := Description{Protocol: stored.Protocol, Capacity: stored.Capacity, ValueSize: stored.ValueSize,
		MaxKeySize: stored.MaxKeySize, Settings: stored.OptionSettings, Restored: stored.Restored, JournalBytes: DirSize(JournalDir(opts.DataDir))}
	if opts.Backend == "disk" || opts.Backend == "" {
		d.StoreBytes = DirSize(filepath.Join(opts.DataDir, "store"))
	}
	return d, nil
}

// DirSize returns the bytes of the files under dir (0 if it is missing).
func DirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// Close closes the store (flushing everything) and the tap log.
func (o *Opened) Close() error {
	err := o.Store.Close()
	if o.tapLog != nil {
		if terr := o.tapLog.Close(); err == nil {
			err = terr
		}
	}
	return err
}

// Discard closes the store and deletes everything it stored under its
// prefix. It is for benchmark runs on shared storage.
func (o *Opened) Discard(ctx context.Context) error {
	err := o.Close()
	if o.opts.Prefix == "" || o.opts.Backend == "mem" {
		return err
	}
	raw, oerr := openBackend(ctx, o.opts.Backend, o.opts.DataDir, o.opts.diskOptions())
	if oerr != nil {
		return errors.Join(err, oerr)
	}
	return errors.Join(err, backend.Drop(ctx, backend.WithPrefix(raw, o.opts.Prefix)), raw.Close())
}

// OpenBackend opens the storage named by spec: "mem", "disk" (under
// dataDir/store, without fsync per write when noFsync) or
// a redis:// or rediss:// URL.
func OpenBackend(ctx context.Context, spec, dataDir string, noFsync bool) (backend.Backend, error) {
	return openBackend(ctx, spec, dataDir, diskOptions{noSync: noFsync})
}

func openBackend(ctx context.Context, spec, dataDir string, o diskOptions) (backend.Backend, error) {
	switch {
	case spec == "mem":
		return mem.New(), nil
	case spec == "disk" || spec == "":
		if o.readOnly {
			if _, err := os.Stat(filepath.Join(dataDir, "store")); err != nil {
				return nil, fmt.Errorf("setup: no store in %s: %w", dataDir, err)
			}
		} else if err := makeDataDir(dataDir); err != nil {
			return nil, err
		}
		return openDisk(filepath.Join(dataDir, "store"), o)
	case IsRedis(spec):
		return redis.Open(ctx, spec)
	}
	return nil, fmt.Errorf("setup: unknown backend %q (want mem, disk, redis://HOST:PORT[/DB] or rediss://...)", spec)
}

// BackendKind names the kind of storage spec names, for display: "disk",
// "mem", "redis" or "rediss", never a URL (which may hold a password).
func BackendKind(spec string) string {
	if IsRedis(spec) {
		kind, _, _ := strings.Cut(spec, ":")
		return kind
	}
	return cmp.Or(spec, "disk")
}

// IsRedis reports whether a backend spec names a Redis server:
// redis://..., or rediss://... over TLS.
func IsRedis(spec string) bool {
	return strings.HasPrefix(spec, "redis://") || strings.HasPrefix(spec, "rediss://")
}
