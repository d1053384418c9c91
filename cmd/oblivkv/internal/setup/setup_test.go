package setup

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/kv"
	_ "github.com/oblivkv/oblivkv/protocol/all"
	"github.com/oblivkv/oblivkv/protocol/treebeard"
	"github.com/oblivkv/oblivkv/seal"
)

func TestOpenOptionArgs(t *testing.T) {
	ctx := context.Background()
	o, err := Open(ctx, Options{Backend: "mem", Capacity: 64, ValueSize: 16, OptionArgs: []string{"trees=3", "stashshards=1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	st := o.Store.Stats()
	if st.Protocol != DefaultProtocol {
		t.Errorf("protocol %s; want the default %s", st.Protocol, DefaultProtocol)
	}
	extra := map[string]float64{}
	for _, e := range st.Extra {
		extra[e.Name] = e.Value
	}
	if extra["trees"] != 3 || extra["stash_shards"] != 1 {
		t.Errorf("stats %v; want trees 3 and stash_shards 1", extra)
	}

	dir := t.TempDir()
	_, err = Open(ctx, Options{Backend: "disk", DataDir: dir, OptionArgs: []string{"bogus=1"}})
	if err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("bad option: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "key")); !os.IsNotExist(err) {
		t.Errorf("key file after a refused option: %v", err)
	}
	if _, err := Open(ctx, Options{Backend: "mem", OptionArgs: []string{"z=1"}, ProtocolOptions: treebeard.Options{}}); err == nil {
		t.Error("both ProtocolOptions and OptionArgs accepted")
	}
}

// TestOpenOblivistoreOptions: integer and fractional settings reach
// oblivistore (its INFO shows them).
func TestOpenOblivistoreOptions(t *testing.T) {
	o, err := Open(t.Context(), Options{Protocol: "oblivistore", Backend: "mem", Capacity: 256, ValueSize: 16,
		OptionArgs: []string{"partitions=8", "evictionrate=1.5"}})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if extra := statsOf(o.Store); extra["partitions"] != 8 || extra["eviction_rate"] != 1.5 {
		t.Errorf("stats %v; want partitions 8 and eviction_rate 1.5", extra)
	}
}

// TestDescriptorsComplete: every registered protocol says what it is,
// and each of its options has a doc and a default, so `oblivkv options`
// leaves none unexplained; an exported field that is no option (of a type
// --opt cannot set) is refused too, as it would be silently unsettable.
func statsOf(s kv.Store) map[string]float64 {
	extra := map[string]float64{}
	for _, e := range s.Stats().Extra {
		extra[e.Name] = e.Value
	}
	return extra
}

// TestOpenKeepsOptions: a store records its options; a reopen with none
// given uses them, one with the same ones opens, and one with another
// value (or a setting of an option left at its default) is refused naming
// both values, before anything is written.
func TestOpenKeepsOptions(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	open := func(args ...string) (*Opened, error) {
		return Open(ctx, Options{Protocol: "oblivistore", Backend: "disk", DataDir: dir, Capacity: 256, ValueSize: 16, OptionArgs: args})
	}
	o, err := open("partitions=8", "evictionrate=1.5")
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Store.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"Partitions": "8", "EvictionRate": "1.5"}
	for _, args := range [][]string{nil, {"EvictionRate=1.50"}, {"partitions=8", "evictionrate=1.5"}} {
		o, err := open(args...)
		if err != nil {
			t.Fatalf("reopen with %q: %v", args, err)
		}
		if st := statsOf(o.Store); st["partitions"] != 8 || st["eviction_rate"] != 1.5 {
			t.Errorf("reopen with %q: stats %v; want partitions 8, eviction_rate 1.5", args, st)
		}
		if v, ok, err := o.Store.Get(ctx, "k"); err != nil || !ok || string(v) != "v" {
			t.Errorf("reopen with %q: Get k = %q, %v, %v; want v", args, v, ok, err)
		}
		if !reflect.DeepEqual(o.Settings, want) {
			t.Errorf("reopen with %q: Settings %v; want %v", args, o.Settings, want)
		}
		if err := o.Close(); err != nil {
			t.Fatal(err)
		}
	}
	journal := DirSize(JournalDir(dir)) // an append-only log and checkpoints
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"evictionrate=3"}, "option EvictionRate is 1.5 in the store, 3 given"},
		{[]string{"evictionrate=2"}, "option EvictionRate is 1.5 in the store, the default (2) given"},
		{[]string{"partitions=8", "shufflingbuffer=512"}, "option ShufflingBuffer is the default (4 times the largest shuffle's write) in the store, 512 given"},
	} {
		_, err := open(tc.args...)
		if !errors.Is(err, kv.ErrMismatch) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("reopen with %q: %v; want ErrMismatch with %q", tc.args, err, tc.want)
		}
	}
	if got := DirSize(JournalDir(dir)); got != journal {
		t.Error("a refused reopen changed the journal")
	}
	d, err := Describe(ctx, Options{Backend: "disk", DataDir: dir})
	if err != nil || d.Protocol != "oblivistore" || d.Capacity != 256 || d.ValueSize != 16 || !reflect.DeepEqual(d.Settings, want) || d.StoreBytes == 0 {
		t.Errorf("Describe = %+v, %v", d, err)
	}
}

// TestOpenRecordWithoutOptions: a store whose metadata record has no
// options (written by an older build) opens with the options given, as
// then, and Describe says none were recorded.
func TestOpenRecordWithoutOptions(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	opts := Options{Backend: "disk", DataDir: dir, Capacity: 64, ValueSize: 16, OptionArgs: []string{"trees=3"}}
	o, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	// Rewrite the record as an older build wrote it: no "options".
	master, err := seal.ReadKeyFile(KeyFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := seal.NewKeys(master)
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenBackend(ctx, "disk", dir, false)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := b.Read(ctx, []string{kv.MetaAddr})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := keys.Open(nil, []byte(kv.MetaAddr), vals[0])
	if err != nil {
		t.Fatal(err)
	}
	var record map[string]any
	if err := json.Unmarshal(plain, &record); err != nil || record["options"] == nil {
		t.Fatalf("record %s: %v; want options in it", plain, err)
	}
	delete(record, "options")
	if plain, err = json.Marshal(record); err != nil {
		t.Fatal(err)
	}
	if err := b.Write(ctx, []backend.Item{{Addr: kv.MetaAddr, Value: keys.Seal(nil, []byte(kv.MetaAddr), plain)}}); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	if d, err := Describe(ctx, Options{Backend: "disk", DataDir: dir}); err != nil || d.Settings != nil || d.Protocol != DefaultProtocol {
		t.Fatalf("Describe = %+v, %v; want no settings recorded", d, err)
	}
	o, err = Open(ctx, opts)
	if err != nil {
		t.Fatalf("reopen of a record without options: %v", err)
	}
	defer o.Close()
	if st := statsOf(o.Store); st["trees"] != 3 {
		t.Errorf("stats %v; want trees 3", st)
	}
}

// TestOpenDefaultGivenIsNoConflict: options given at their constant
// defaults name the same store as none: a store created without options
// reopens with them, and one created with them records none.
func TestOpenDefaultGivenIsNoConflict(t *testing.T) {
	ctx := t.Context()
	for _, create := range [][]string{nil, {"epoch=1ms", "trees=8"}} {
		dir := t.TempDir()
		for _, args := range [][]string{create, {"Epoch=1000us", "z=4"}, nil} {
			o, err := Open(ctx, Options{Backend: "disk", DataDir: dir, Capacity: 64, ValueSize: 16, OptionArgs: args})
			if err != nil {
				t.Fatalf("created with %q, opened with %q: %v", create, args, err)
			}
			if len(o.Settings) != 0 {
				t.Errorf("created with %q, opened with %q: settings %v; want none", create, args, o.Settings)
			}
			if err := o.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if d, err := Describe(ctx, Options{Backend: "disk", DataDir: dir}); err != nil || d.Settings == nil || len(d.Settings) != 0 {
			t.Errorf("created with %q: Describe = %+v, %v; want an empty record of options", create, d, err)
		}
	}
}
