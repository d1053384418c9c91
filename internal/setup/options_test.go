package setup

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/kv"
	_ "github.com/oblivkv/oblivkv/protocol/all"
	"github.com/oblivkv/oblivkv/protocol/oblivistore"
	"github.com/oblivkv/oblivkv/protocol/pathoram"
	"github.com/oblivkv/oblivkv/protocol/taostore"
	"github.com/oblivkv/oblivkv/protocol/treebeard"
	"github.com/oblivkv/oblivkv/seal"
)

func TestProtocolOptionsValid(t *testing.T) {
	for _, tc := range []struct {
		protocol string
		opts     []string
		want     any
	}{
		{"treebeard", nil, nil},
		{"plain", nil, nil}, // no settings: the defaults, for any protocol
		{"treebeard", []string{"trees=8", "Routers=2", "STASHSHARDS=3", "oram-shards=4", "a=50", "k=100", "S=5", "z=1"},
			treebeard.Options{Trees: 8, Routers: 2, StashShards: 3, ORAMShards: 4, A: 50, K: 100, S: 5, Z: 1}},
		{"treebeard", []string{"epoch=2ms"}, treebeard.Options{Epoch: 2 * time.Millisecond}},
		{"treebeard", []string{"epoch=-1ns", "epoch = 500us"}, treebeard.Options{Epoch: 500 * time.Microsecond}}, // the last wins
		{"treebeard", []string{"epoch=0"}, treebeard.Options{}},
		{"taostore", []string{"z=2", "k=10", "cached_levels=3"}, taostore.Options{Z: 2, K: 10, CachedLevels: 3}},
		{"pathoram", []string{"Z=8", "batchbytes=1048576"}, pathoram.Options{Z: 8, BatchBytes: 1 << 20}},
		{"oblivistore", []string{"partitions=16", "evictionrate=1.5", "early-cache-ins=64", "shuffling_buffer=512", "EvictionsAhead=32", "shuffleioperaccess=100"},
			oblivistore.Options{Partitions: 16, EvictionRate: 1.5, EarlyCacheIns: 64, ShufflingBuffer: 512, EvictionsAhead: 32, ShuffleIOPerAccess: 100}},
	} {
		got, err := ProtocolOptions(tc.protocol, tc.opts)
		if err != nil {
			t.Errorf("ProtocolOptions(%s, %q): %v", tc.protocol, tc.opts, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ProtocolOptions(%s, %q) = %#v; want %#v", tc.protocol, tc.opts, got, tc.want)
		}
	}
}

func TestProtocolOptionsErrors(t *testing.T) {
	for _, tc := range []struct {
		protocol string
		opts     []string
		want     []string // substrings of the error
	}{
		{"treebeard", []string{"bogus=1"}, []string{`no option "bogus"`, "Routers, StashShards, ORAMShards, Trees, Z, S, A, K, CachedLevels, Epoch"}},
		{"treebeard", []string{"seed=1"}, []string{`no option "seed"`}}, // unexported fields are not options
		{"taostore", []string{"trees=2"}, []string{`taostore has no option "trees"`, "Z, K, CachedLevels"}},
		{"pathoram", []string{"k=2"}, []string{"Z, BatchBytes"}},
		{"oblivistore", []string{"z=4"}, []string{`oblivistore has no option "z"`, "Partitions, EvictionRate, EarlyCacheIns, ShufflingBuffer, EvictionsAhead, ShuffleIOPerAccess"}},
		{"oblivistore", []string{"evictionrate=fast"}, []string{"evictionrate", "number"}},
		{"oblivistore", []string{"partitions=1.5"}, []string{"integer"}},
		{"treebeard", []string{"trees=many"}, []string{"trees", "integer"}},
		{"treebeard", []string{"trees=1.5"}, []string{"integer"}},
		{"treebeard", []string{"trees="}, []string{"integer"}},
		{"treebeard", []string{"trees=99999999999999999999"}, []string{"integer"}},
		{"treebeard", []string{"epoch=3"}, []string{"epoch", "duration"}}, // a duration needs its unit
		{"treebeard", []string{"trees"}, []string{"NAME=VALUE"}},
		{"treebeard", []string{"=4"}, []string{"NAME=VALUE"}},
		{"plain", []string{"z=4"}, []string{"plain takes no options"}},
		{"encrypted", []string{"trees=4"}, []string{"encrypted takes no options"}},
		{"nosuch", []string{"z=4"}, []string{"nosuch", "known"}},
	} {
		_, err := ProtocolOptions(tc.protocol, tc.opts)
		if err == nil {
			t.Errorf("ProtocolOptions(%s, %q) accepted", tc.protocol, tc.opts)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("ProtocolOptions(%s, %q): error %q lacks %q", tc.protocol, tc.opts, err, w)
			}
		}
	}
}

func TestProtocolOptionsEach(t *testing.T) {
	got, err := ProtocolOptionsEach([]string{"plain", "pathoram", "taostore", "treebeard"},
		[]string{"z=2", "k=7", "epoch=3ms"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"pathoram":  pathoram.Options{Z: 2},
		"taostore":  taostore.Options{Z: 2, K: 7},
		"treebeard": treebeard.Options{Z: 2, K: 7, Epoch: 3 * time.Millisecond},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v\nwant %#v", got, want)
	}
	if got, err := ProtocolOptionsEach([]string{"plain", "encrypted"}, nil); err != nil || len(got) != 0 {
		t.Errorf("no settings: %v, %v", got, err)
	}
	for _, tc := range []struct {
		protocols, opts []string
		want            string
	}{
		{[]string{"plain", "taostore"}, []string{"trees=2"}, "no protocol of the run has an option \"trees\" (options of plain: none; taostore: Z, K, CachedLevels)"},
		{[]string{"taostore", "treebeard"}, []string{"k=x"}, "integer"},
		{[]string{"plain"}, []string{"z=1"}, "plain takes no options"},
		{[]string{"treebeard"}, []string{"bogus=1"}, "its options: Routers"},
		{[]string{"treebeard"}, []string{"bogus"}, "NAME=VALUE"},
	} {
		if _, err := ProtocolOptionsEach(tc.protocols, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ProtocolOptionsEach(%q, %q) = %v; want an error with %q", tc.protocols, tc.opts, err, tc.want)
		}
	}
}

func TestFormatOptions(t *testing.T) {
	o := treebeard.Options{Trees: 4, Epoch: 2 * time.Millisecond}
	s := FormatOptions(o)
	if s != "Trees=4 Epoch=2ms" {
		t.Errorf("FormatOptions = %q", s)
	}
	back, err := ProtocolOptions("treebeard", strings.Fields(s))
	if err != nil || !reflect.DeepEqual(back, o) {
		t.Errorf("read back: %#v, %v", back, err)
	}
}

// TestOpenOptionArgs: settings reach the protocol, and a bad setting for a
// new store is refused before a key file is written.
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
func TestDescriptorsComplete(t *testing.T) {
	for _, name := range kv.Protocols() {
		p, _ := kv.Lookup(name)
		if p.Summary == "" || strings.Contains(p.Summary, "\n") {
			t.Errorf("protocol %s: summary %q; want one line", name, p.Summary)
		}
		if p.Options == nil {
			continue
		}
		typ := reflect.TypeOf(p.Options)
		for i := range typ.NumField() {
			if f := typ.Field(i); f.IsExported() && !settable(f) {
				t.Errorf("protocol %s: exported Options field %s (%s) cannot be set by --opt", name, f.Name, f.Type)
			}
		}
		list := OptionList(name)
		if len(list) == 0 {
			t.Errorf("protocol %s has Options but no settable option", name)
		}
		for _, o := range list {
			if o.Default == "" || !strings.HasSuffix(o.Doc, ".") || strings.Count(o.Doc, ". ") > 0 {
				t.Errorf("protocol %s option %s: default %q, doc %q; want a default and a one-sentence doc", name, o.Name, o.Default, o.Doc)
			}
		}
	}
	if !slices.Contains(kv.Protocols(), DefaultProtocol) {
		t.Errorf("the default protocol %s is not registered", DefaultProtocol)
	}
}

// TestOptionList: types, defaults and whether a default is a constant
// come from each field's type and tags.
func TestOptionList(t *testing.T) {
	got := map[string]Option{}
	for _, o := range OptionList("treebeard") {
		got[o.Name] = o
	}
	for _, want := range []Option{
		{Name: "Trees", Type: "integer", Default: "8", Constant: true, Doc: "Storage trees."},
		{Name: "ORAMShards", Type: "integer", Default: "min(2, Trees)", Doc: got["ORAMShards"].Doc},
		{Name: "Epoch", Type: "duration", Default: "1ms", Constant: true, Doc: got["Epoch"].Doc},
	} {
		if got[want.Name] != want {
			t.Errorf("treebeard option %s: %+v; want %+v", want.Name, got[want.Name], want)
		}
	}
	if o := OptionList("oblivistore")[1]; o.Name != "EvictionRate" || o.Type != "number" || !o.Constant {
		t.Errorf("oblivistore's second option: %+v; want EvictionRate, a number with a constant default", o)
	}
	if OptionList("plain") != nil || OptionList("nosuch") != nil {
		t.Error("options listed for a protocol without any")
	}
}

// TestSettingsDropDefaults: an option given at its constant default is no
// setting, in any spelling of the value; one whose default depends on the
// store is kept, as is every other value.
func TestSettingsDropDefaults(t *testing.T) {
	for _, tc := range []struct {
		protocol string
		args     []string
		want     map[string]string
	}{
		{"treebeard", []string{"epoch=1ms"}, map[string]string{}},
		{"treebeard", []string{"epoch=1000us", "trees=8", "z=4", "k=51"}, map[string]string{"K": "51"}},
		{"treebeard", []string{"oramshards=2"}, map[string]string{"ORAMShards": "2"}}, // min(2, Trees)
		{"oblivistore", []string{"evictionrate=2.0", "partitions=16"}, map[string]string{"Partitions": "16"}},
		{"pathoram", []string{"batchbytes=4194304", "z=4"}, map[string]string{}},
		{"cloak", []string{"s=1", "delta=20ms", "cache=999"}, map[string]string{"Cache": "999"}},
	} {
		o, err := ProtocolOptions(tc.protocol, tc.args)
		if err != nil {
			t.Fatal(err)
		}
		if got := Settings(o); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Settings(ProtocolOptions(%s, %q)) = %v; want %v", tc.protocol, tc.args, got, tc.want)
		}
	}
}

// TestSettingsRoundTrip: options set from settings read back as the same
// settings, in canonical form (field names, normalised values), and
// Settings of no options is empty but not nil.
func TestSettingsRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		protocol string
		args     []string
		want     map[string]string
	}{
		{"treebeard", []string{"trees=4", "epoch=2000us", "stash-shards=3"}, map[string]string{"Trees": "4", "Epoch": "2ms", "StashShards": "3"}},
		{"oblivistore", []string{"evictionrate=1.5", "partitions=16"}, map[string]string{"EvictionRate": "1.5", "Partitions": "16"}},
		{"taostore", []string{"cached_levels=2", "z=0"}, map[string]string{"CachedLevels": "2"}}, // 0 is the default: not a setting
		{"cloak", []string{"delta=-1ms", "s=0.5"}, map[string]string{"Delta": "-1ms", "S": "0.5"}},
	} {
		o, err := ProtocolOptions(tc.protocol, tc.args)
		if err != nil {
			t.Fatal(err)
		}
		got := Settings(o)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Settings(ProtocolOptions(%s, %q)) = %v; want %v", tc.protocol, tc.args, got, tc.want)
		}
		back, err := ProtocolOptions(tc.protocol, SettingArgs(got))
		if err != nil || !reflect.DeepEqual(back, o) {
			t.Errorf("%s: ProtocolOptions(SettingArgs(%v)) = %#v, %v; want %#v", tc.protocol, got, back, err, o)
		}
		ptr := reflect.New(reflect.TypeOf(back)) // a *Options reads the same
		ptr.Elem().Set(reflect.ValueOf(back))
		if again := Settings(ptr.Interface()); !reflect.DeepEqual(again, got) {
			t.Errorf("%s: settings read back %v; want %v", tc.protocol, again, got)
		}
	}
	if got := Settings(nil); got == nil || len(got) != 0 {
		t.Errorf("Settings(nil) = %#v; want an empty map", got)
	}
	if got := SettingArgs(map[string]string{"Z": "2", "K": "7"}); !slices.Equal(got, []string{"K=7", "Z=2"}) {
		t.Errorf("SettingArgs = %q; want sorted", got)
	}
}

// statsOf returns a store's protocol stats by name.
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
