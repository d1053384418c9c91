package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/seal"
)

// MetaAddr is the backend address of the sealed metadata record. Protocols
// must not use addresses beginning with "meta/".
const MetaAddr = "meta/store"

// metaFormat is the storage format this build reads and writes. 2: each
// entry of treebeard's bucket metadata holds its block's leaf, and the
// journal records of taostore, cloak and durable's plans changed.
const metaFormat = 2

// rekeyedFormat is metaFormat in a record that keeps the PRF key of the
// store's first master key (meta.PRFKey): a build that reads only
// metaFormat refuses it, rather than derive identifiers under the new
// key and find the store empty.
const rekeyedFormat = 3

// meta is the sealed record that says what a backend holds.
type meta struct {
	Format     int    `json:"format"`
	Protocol   string `json:"protocol"`
	Capacity   int    `json:"capacity"`
	ValueSize  int    `json:"value_size"`
	MaxKeySize int    `json:"max_key_size"`
	// Options are the protocol's options (Config.OptionSettings). Absent
	// (nil) in a record of an older build, which kept no options, and in
	// one whose opener gave no OptionSettings: nothing is known of them.
	Options map[string]string `json:"options"`
	// PRFKey is the PRF subkey of the key the store was created under,
	// set by its first rekey (ResealMeta): identifiers derived from
	// logical keys (tree block IDs, the encrypted baseline's addresses)
	// cannot be derived again without the keys, which no store keeps.
	PRFKey []byte `json:"prf_key,omitempty"`
	// Restored names the backup the store was last restored from; absent
	// in a store never restored (and in every record of an older build).
	Restored *Restore `json:"restored,omitempty"`
}

// Restore is what a store's metadata records of the backup it was
// restored from (oblivkv restore), so that the restore stays visible and
// storage from before it can be told from storage after it.
type Restore struct {
	// At is the journal position of the backup's storage anchor.
	At uint64 `json:"at"`
	// Time is when the restore was made.
	Time time.Time `json:"time"`
	// Digest is the archive's SHA-256, in hex.
	Digest string `json:"digest"`
}

// Same reports whether r and o name the same restore (both nil: none).
func (r *Restore) Same(o *Restore) bool {
	if r == nil || o == nil {
		return r == o
	}
	return r.At == o.At && r.Digest == o.Digest && r.Time.Equal(o.Time)
}

func metaOf(cfg Config) meta {
	return meta{Format: metaFormat, Protocol: cfg.Protocol, Capacity: cfg.Capacity,
		ValueSize: cfg.ValueSize, MaxKeySize: cfg.MaxKeySize, Options: cfg.OptionSettings}
}

func (m meta) matches(want meta) error {
	if m.Format != metaFormat && m.Format != rekeyedFormat {
		return fmt.Errorf("%w: storage format %d, this build reads %d (open it with the build that created it; to move "+
			"its data to this build, dump it with that build's `oblivkv dump` and load the file into a new store with this "+
			"build's `oblivkv load`: see \"Dump and load\" in docs/OPERATIONS.md)", ErrMismatch, m.Format, metaFormat)
	}
	if m.Protocol != want.Protocol {
		return fmt.Errorf("%w: it holds protocol %q, asked for %q", ErrMismatch, m.Protocol, want.Protocol)
	}
	if m.Capacity != want.Capacity || m.ValueSize != want.ValueSize || m.MaxKeySize != want.MaxKeySize {
		return fmt.Errorf("%w: it was created with capacity %d, value size %d, max key size %d; asked for %d, %d, %d",
			ErrMismatch, m.Capacity, m.ValueSize, m.MaxKeySize, want.Capacity, want.ValueSize, want.MaxKeySize)
	}
	// Options are compared only when both sides know them.
	if m.Options != nil && want.Options != nil && !maps.Equal(m.Options, want.Options) {
		return fmt.Errorf("%w: %s (a store keeps the options it was created with: give none, or the stored values)",
			ErrMismatch, optionDiff(m.Protocol, m.Options, want.Options))
	}
	return nil
}

// optionDiff names each option of protocol whose value differs between
// the stored and the wanted settings, an option absent from one having its
// default.
func optionDiff(protocol string, stored, want map[string]string) string {
	names := slices.AppendSeq(slices.Collect(maps.Keys(stored)), maps.Keys(want))
	slices.Sort(names)
	var differ []string
	for _, name := range slices.Compact(names) {
		if stored[name] != want[name] {
			differ = append(differ, fmt.Sprintf("option %s is %s in the store, %s given", name,
				optionValue(protocol, name, stored[name]), optionValue(protocol, name, want[name])))
		}
	}
	return strings.Join(differ, "; ")
}

// optionValue describes the value of option name in settings: the value,
// or for one left out its default as the `default` tag of the protocol's
// Options states it (see Protocol.Options).
func optionValue(protocol, name, value string) string {
	if value != "" {
		return value
	}
	p, _ := Lookup(protocol)
	if p.Options != nil {
		if f, ok := reflect.TypeOf(p.Options).FieldByName(name); ok && f.Tag.Get("default") != "" {
			return "the default (" + f.Tag.Get("default") + ")"
		}
	}
	return "the default"
}

// Probe reports whether b already holds a store, without needing its key.
// It lets a caller refuse to create a new key for storage that has data.
func Probe(ctx context.Context, b backend.Backend) (bool, error) {
	vals, err := b.Read(ctx, []string{MetaAddr})
	if err != nil {
		return false, fmt.Errorf("kv: reading store metadata: %w", err)
	}
	return vals[0] != nil, nil
}

// Describe returns the protocol, parameters and options (OptionSettings,
// nil if none were recorded) recorded in b, so a caller can reopen a
// store without repeating them.
func Describe(ctx context.Context, b backend.Backend, keys *seal.Keys) (Config, bool, error) {
	m, fresh, err := readMeta(ctx, b, keys)
	if err != nil || fresh {
		return Config{}, false, err
	}
	return Config{Protocol: m.Protocol, Capacity: m.Capacity, ValueSize: m.ValueSize, MaxKeySize: m.MaxKeySize,
		OptionSettings: m.Options, Restored: m.Restored}, true, nil
}

// MarkRestored records in b's metadata record that its store was
// restored from a backup (r), keeping everything else the record says.
func MarkRestored(ctx context.Context, b backend.Backend, keys *seal.Keys, r Restore) error {
	m, fresh, err := readMeta(ctx, b, keys)
	if err != nil {
		return err
	}
	if fresh {
		return errors.New("kv: storage holds no store to mark restored")
	}
	m.Restored = &r
	return writeMeta(ctx, b, keys, m)
}

func readMeta(ctx context.Context, b backend.Backend, keys *seal.Keys) (meta, bool, error) {
	vals, err := b.Read(ctx, []string{MetaAddr})
	if err != nil {
		return meta{}, false, fmt.Errorf("kv: reading store metadata: %w", err)
	}
	if vals[0] == nil {
		return meta{}, true, nil
	}
	plain, err := keys.Open(nil, []byte(MetaAddr), vals[0])
	if errors.Is(err, seal.ErrTampered) {
		return meta{}, false, ErrWrongKey
	}
	var m meta
	if err := json.Unmarshal(plain, &m); err != nil {
		return meta{}, false, fmt.Errorf("kv: store metadata: %w", err)
	}
	return m, false, nil
}

// keysOf returns keys with the PRF key the record keeps, if it keeps one.
func (m meta) keysOf(keys *seal.Keys) (*seal.Keys, error) {
	if m.PRFKey == nil {
		return keys, nil
	}
	return keys.WithPRFKey(m.PRFKey)
}

// ResealMeta returns the metadata record stored (as read from MetaAddr,
// sealed under from or, by a rekey cut short, already under to) sealed
// under to, keeping the PRF key of the store's first key.
func ResealMeta(from, to *seal.Keys, stored []byte) ([]byte, error) {
	plain, err := seal.OpenEither(from, to, []byte(MetaAddr), stored)
	if err != nil {
		return nil, fmt.Errorf("store metadata: %w", err)
	}
	var m meta
	if err := json.Unmarshal(plain, &m); err != nil {
		return nil, fmt.Errorf("kv: store metadata: %w", err)
	}
	if m.PRFKey == nil {
		m.PRFKey, m.Format = from.PRFKey(), rekeyedFormat
	}
	if plain, err = json.Marshal(m); err != nil {
		return nil, err
	}
	return to.Seal(nil, []byte(MetaAddr), plain), nil
}

func writeMeta(ctx context.Context, b backend.Backend, keys *seal.Keys, m meta) error {
	plain, err := json.Marshal(m)
	if err != nil {
		return err
	}
	sealed := keys.Seal(nil, []byte(MetaAddr), plain)
	if err := b.Write(ctx, []backend.Item{{Addr: MetaAddr, Value: sealed}}); err != nil {
		return fmt.Errorf("kv: writing store metadata: %w", err)
	}
	return nil
}
