// Package setup turns deployment settings (backend spec, data directory,
// key file, emulated latency, tap file) into an open kv.Store. It is shared
// by `oblivkv serve`, `oblivkv load` and `oblivkv bench`.
//
// It owns the data directory layout (DIR/key, the 0600 master key file, and
// DIR/store, the embedded backend's files) and the rule that a key is only
// ever created for storage that holds no store: a missing or wrong key for
// existing data is a startup error, never a silent re-initialisation. It
// must never print or log key material.
package setup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/disk"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/backend/redis"
	"github.com/oblivkv/oblivkv/kv"
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
	// Backend is "mem", "disk" or "redis://HOST:PORT[/DB]".
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
	// not both. Options are not stored with the store: each open takes
	// its own.
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
}

// Opened is an open store and what must be released with it.
type Opened struct {
	Store   kv.Store
	KeyFile string // "" when the key is ephemeral or from the environment
	Fresh   bool   // the store was created by this Open
	opts    Options
	tapLog  *observe.FileLog
}

// KeyFile returns the key file path of a data directory.
func KeyFile(dataDir string) string { return filepath.Join(dataDir, "key") }

// JournalDir returns the journal directory of a data directory, where a
// store keeps its trusted state (internal/journal).
func JournalDir(dataDir string) string { return filepath.Join(dataDir, "journal") }

// Open opens the backend and the store described by opts. A protocol
// named but not registered is refused before anything is created.
func Open(ctx context.Context, opts Options) (*Opened, error) {
	if opts.Protocol != "" && !slices.Contains(kv.Protocols(), opts.Protocol) {
		return nil, fmt.Errorf("%w %q (known: %v)", kv.ErrUnknownProtocol, opts.Protocol, kv.Protocols())
	}
	raw, err := OpenBackend(ctx, opts.Backend, opts.DataDir, opts.NoFsync)
	if err != nil {
		return nil, err
	}
	b := backend.WithLatency(backend.WithPrefix(raw, opts.Prefix), opts.BackendLatency)
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
	}
	keys, err := o.loadKeys(exists)
	if err != nil {
		return nil, err
	}
	if exists {
		if opts, err = o.withStored(ctx, b, keys, opts); err != nil {
			return nil, err
		}
		if opts, err = resolve(opts); err != nil {
			return nil, err
		}
	}
	cfg := kv.Config{Protocol: opts.Protocol, Backend: b, Keys: keys, Capacity: opts.Capacity,
		ValueSize: opts.ValueSize, Options: opts.ProtocolOptions, NoFsync: opts.NoFsync}
	if opts.Backend != "mem" && opts.DataDir != "" {
		if err := makeDataDir(opts.DataDir); err != nil {
			return nil, err
		}
		cfg.JournalDir = JournalDir(opts.DataDir)
	}
	if opts.TapFile != "" {
		if o.tapLog, err = observe.CreateFileLog(opts.TapFile); err != nil {
			return nil, err
		}
		cfg.TapLog = o.tapLog
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
	opts.ProtocolOptions, err = ProtocolOptions(opts.Protocol, opts.OptionArgs)
	opts.OptionArgs = nil
	return opts, err
}

// withStored fills the options left unset (empty protocol, zero sizes)
// from the parameters the existing store was created with, so a restart
// needs no flags repeated.
func (o *Opened) withStored(ctx context.Context, b backend.Backend, keys *seal.Keys, opts Options) (Options, error) {
	stored, _, err := kv.Describe(ctx, b, keys)
	if err != nil {
		return opts, o.nameKeyFile(err)
	}
	opts.Protocol = cmp.Or(opts.Protocol, stored.Protocol)
	opts.Capacity = cmp.Or(opts.Capacity, stored.Capacity)
	opts.ValueSize = cmp.Or(opts.ValueSize, stored.ValueSize)
	return opts, nil
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

// makeDataDir creates a data directory, readable by its owner only.
func makeDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("setup: creating data dir: %w", err)
	}
	return nil
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
	raw, oerr := OpenBackend(ctx, o.opts.Backend, o.opts.DataDir, o.opts.NoFsync)
	if oerr != nil {
		return errors.Join(err, oerr)
	}
	return errors.Join(err, backend.Drop(ctx, backend.WithPrefix(raw, o.opts.Prefix)), raw.Close())
}

// OpenBackend opens the storage named by spec: "mem", "disk" (under
// dataDir/store, without fsync per write when noFsync) or
// "redis://HOST:PORT[/DB]".
func OpenBackend(ctx context.Context, spec, dataDir string, noFsync bool) (backend.Backend, error) {
	switch {
	case spec == "mem":
		return mem.New(), nil
	case spec == "disk" || spec == "":
		if err := makeDataDir(dataDir); err != nil {
			return nil, err
		}
		return disk.OpenWith(filepath.Join(dataDir, "store"), disk.Options{NoSync: noFsync})
	case strings.HasPrefix(spec, "redis://"):
		return redis.Open(ctx, spec)
	}
	return nil, fmt.Errorf("setup: unknown backend %q (want mem, disk or redis://HOST:PORT[/DB])", spec)
}
