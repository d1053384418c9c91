package kv

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/seal"
)

// Defaults for Config fields left zero.
const (
	DefaultCapacity   = 1 << 16
	DefaultValueSize  = 1024
	DefaultMaxKeySize = 256
)

// Config describes the store to open.
type Config struct {
	// Protocol is a registered protocol name, e.g. "encrypted".
	Protocol string
	// Backend is the untrusted storage. Open wraps it in an observe.Tap;
	// the Store owns it and closes it on Close.
	Backend backend.Backend
	// Keys seal everything written to Backend.
	Keys *seal.Keys
	// Capacity is the number of keys the store can hold (default 65536).
	Capacity int
	// ValueSize is the largest value in bytes (default 1024). Oblivious
	// protocols pad every value to this size.
	ValueSize int
	// MaxKeySize is the largest key in bytes (default 256).
	MaxKeySize int
	// TapLog, if set, receives one record per backend call.
	TapLog observe.Sink
	// EngineStats, if set, returns the storage engine's own figures
	// (StatDisk*), which Stats appends to the protocol's.
	EngineStats func() []Stat
	// Options holds protocol-specific options: a value of the protocol
	// package's Options type, or nil for its defaults.
	Options any
	// OptionSettings are the same options in a canonical, protocol
	// independent form: option name to value, the defaults left out
	// (kv/options.Settings makes it from Options). A new store records them
	// in its metadata, and Describe returns them. Opening an existing
	// store that recorded some, a non-nil OptionSettings must equal them
	// (ErrMismatch otherwise). nil: none recorded, none checked.
	OptionSettings map[string]string
	// OpenJournal opens, under Keys, the journal on the proxy's own
	// trusted disk that keeps the store's trusted state durable
	// (internal/durable/journal.Opener). Open calls it once storage's
	// metadata matches, so a refused Open leaves the journal as it was,
	// and the Store closes the journal after the protocol. nil: the
	// state lives in memory only, so the store can be used but not
	// reopened, and a crash loses it.
	OpenJournal func(*seal.Keys) (Journal, error)
	// Restored is the backup the store was restored from, as its
	// metadata records it: Describe fills it in, Open ignores it.
	Restored *Restore
	// NoFsync says the journal commits without fsync (the --fsync none
	// policy): storage then keeps its own fsync of every write.
	NoFsync bool
}

// Env is what a protocol factory receives.
type Env struct {
	Backend    backend.Backend // the tapped backend: every call is observed
	Keys       *seal.Keys
	Capacity   int
	ValueSize  int
	MaxKeySize int
	Options    any
	// Fresh is true when the backend holds no store yet: the protocol
	// builds its initial layout; otherwise it recovers its saved state.
	Fresh bool
	// Journal keeps the store's trusted state durable (nil: Config had
	// no OpenJournal). The Store closes it after the protocol's Close.
	Journal Journal
}

// Journal is a store's trusted log on the proxy's disk (package
// internal/durable drives it; internal/durable/journal keeps one in
// files). Only the command's set-up chooses the implementation, so the
// API carries none of a storage engine.
type Journal = durable.Journal

// Factory opens one protocol's store.
type Factory func(ctx context.Context, env Env) (Store, error)

// FactoryOf makes a Factory of a protocol's open function that returns its
// own store type, so a failed open returns a nil Store, not a typed nil.
func FactoryOf[S Store](open func(context.Context, Env) (S, error)) Factory {
	return func(ctx context.Context, env Env) (Store, error) {
		s, err := open(ctx, env)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}

// Open opens (or creates) a store of cfg.Protocol over cfg.Backend.
func Open(ctx context.Context, cfg Config) (Store, error) {
	p, ok := Lookup(cfg.Protocol)
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %v)", ErrUnknownProtocol, cfg.Protocol, Protocols())
	}
	if cfg.Backend == nil || cfg.Keys == nil {
		return nil, fmt.Errorf("kv: Config needs a Backend and Keys")
	}
	cfg = withDefaults(cfg)
	if err := validate(cfg); err != nil {
		return nil, err
	}
	tap := observe.NewTap(cfg.Backend, cfg.TapLog)
	m, fresh, err := readMeta(ctx, tap, cfg.Keys)
	if err != nil {
		return nil, err
	}
	want := metaOf(cfg)
	if !fresh {
		if err := m.matches(want); err != nil {
			return nil, err
		}
		if cfg.Keys, err = m.keysOf(cfg.Keys); err != nil {
			return nil, err
		}
	}
	env := Env{Backend: tap, Keys: cfg.Keys, Capacity: cfg.Capacity, ValueSize: cfg.ValueSize,
		MaxKeySize: cfg.MaxKeySize, Options: cfg.Options, Fresh: fresh}
	if cfg.OpenJournal != nil {
		if env.Journal, err = cfg.OpenJournal(cfg.Keys); err != nil {
			if errors.Is(err, durable.ErrWrongKey) {
				err = fmt.Errorf("%w: %w", ErrWrongKey, err)
			}
			return nil, err
		}
	}
	inner, err := p.Open(ctx, env)
	switch {
	case err != nil:
		err = fmt.Errorf("kv: opening %s: %w", cfg.Protocol, err)
	case fresh:
		// The metadata record commits the new store: written only after
		// the protocol built its initial layout.
		if err = writeMeta(ctx, tap, cfg.Keys, want); err != nil {
			inner.Close()
		}
	}
	if err != nil {
		if env.Journal != nil {
			env.Journal.Close()
		}
		return nil, err
	}
	if w, ok := inner.(WriteJournaler); ok && w.JournalsEveryWrite() && !cfg.NoFsync {
		// The journal redoes what storage lost, and its checkpoints sync
		// storage: one fsync per operation instead of two.
		backend.DeferSync(tap)
	}
	if st, ok := inner.(Starter); ok {
		st.Start()
	}
	c := newChecked(inner, tap, cfg)
	c.journal = env.Journal
	return c, nil
}

// Starter is implemented by a store with work of its own to run in the
// background (cloak's batches, which leave at a fixed rate whether clients
// ask or not). Open calls Start once the store is committed (a new store's
// metadata written), so that no background work of a creation cut short
// reaches its journal: the next start then builds the store afresh.
type Starter interface {
	Start()
}

// WriteJournaler is implemented by a store whose journal holds every
// backend write it issues, with its data or what rebuilds it, and redoes
// them after a crash (internal/durable). Its storage then needs to be durable only at the
// journal's checkpoints, which sync it, so Open lets a disk backend skip
// the fsync of each write (backend.DeferSync).
type WriteJournaler interface {
	JournalsEveryWrite() bool
}

func withDefaults(cfg Config) Config {
	cfg.Capacity = cmp.Or(cfg.Capacity, DefaultCapacity)
	cfg.ValueSize = cmp.Or(cfg.ValueSize, DefaultValueSize)
	cfg.MaxKeySize = cmp.Or(cfg.MaxKeySize, DefaultMaxKeySize)
	return cfg
}

func validate(cfg Config) error {
	switch {
	case cfg.Capacity < 1:
		return fmt.Errorf("kv: capacity must be at least 1, got %d", cfg.Capacity)
	case cfg.ValueSize < 1 || cfg.ValueSize > 64<<20:
		return fmt.Errorf("kv: value size must be between 1 byte and 64 MiB, got %d", cfg.ValueSize)
	case cfg.MaxKeySize < 1 || cfg.MaxKeySize > 64<<10:
		return fmt.Errorf("kv: maximum key size must be between 1 byte and 64 KiB, got %d", cfg.MaxKeySize)
	}
	return nil
}

// OptionsOf returns a protocol's options from Env.Options, which may hold
// a T, a *T or nothing (the zero T: every default). Anything else is a
// clear error rather than silently ignored options.
func OptionsOf[T any](protocol string, v any) (T, error) {
	var o T
	switch v := v.(type) {
	case nil:
	case T:
		o = v
	case *T:
		if v != nil {
			o = *v
		}
	default:
		return o, fmt.Errorf("%s: options of type %T, want %T", protocol, v, o)
	}
	return o, nil
}
