package options

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/kv"
	_ "github.com/oblivkv/oblivkv/protocol/all"
	"github.com/oblivkv/oblivkv/protocol/oblivistore"
	"github.com/oblivkv/oblivkv/protocol/pathoram"
	"github.com/oblivkv/oblivkv/protocol/taostore"
	"github.com/oblivkv/oblivkv/protocol/treebeard"
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
		got, err := Parse(tc.protocol, tc.opts)
		if err != nil {
			t.Errorf("Parse(%s, %q): %v", tc.protocol, tc.opts, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Parse(%s, %q) = %#v; want %#v", tc.protocol, tc.opts, got, tc.want)
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
		{"oblivistore", []string{"z=4"}, []string{`oblivistore has no option "z"`, "Partitions, Groups, EvictionRate, EarlyCacheIns, ShufflingBuffer, EvictionsAhead, ShuffleIOPerAccess"}},
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
		_, err := Parse(tc.protocol, tc.opts)
		if err == nil {
			t.Errorf("Parse(%s, %q) accepted", tc.protocol, tc.opts)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Parse(%s, %q): error %q lacks %q", tc.protocol, tc.opts, err, w)
			}
		}
	}
}

func TestProtocolOptionsEach(t *testing.T) {
	got, err := ParseEach([]string{"plain", "pathoram", "taostore", "treebeard"},
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
	if got, err := ParseEach([]string{"plain", "encrypted"}, nil); err != nil || len(got) != 0 {
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
		if _, err := ParseEach(tc.protocols, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseEach(%q, %q) = %v; want an error with %q", tc.protocols, tc.opts, err, tc.want)
		}
	}
}

func TestFormatOptions(t *testing.T) {
	o := treebeard.Options{Trees: 4, Epoch: 2 * time.Millisecond}
	s := Format(o)
	if s != "Trees=4 Epoch=2ms" {
		t.Errorf("Format = %q", s)
	}
	back, err := Parse("treebeard", strings.Fields(s))
	if err != nil || !reflect.DeepEqual(back, o) {
		t.Errorf("read back: %#v, %v", back, err)
	}
}

// TestOpenOptionArgs: settings reach the protocol, and a bad setting for a
// new store is refused before a key file is written.
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
			if f := typ.Field(i); f.IsExported() && !settable(f) && !isKnobs(f) {
				t.Errorf("protocol %s: exported Options field %s (%s) cannot be set by --opt", name, f.Name, f.Type)
			}
		}
		checkShape(t, name, typ)
		list := List(name)
		if len(list) == 0 {
			t.Errorf("protocol %s has Options but no settable option", name)
		}
		for _, o := range list {
			if o.Default == "" || !strings.HasSuffix(o.Doc, ".") || strings.Count(o.Doc, ". ") > 0 {
				t.Errorf("protocol %s option %s: default %q, doc %q; want a default and a one-sentence doc", name, o.Name, o.Default, o.Doc)
			}
		}
	}
}

// isKnobs reports whether f is an Options' TestingKnobs: a struct of
// hooks for tests.
func isKnobs(f reflect.StructField) bool {
	return f.Name == "TestingKnobs" && f.Type.Kind() == reflect.Struct
}

// checkShape fails t unless protocol's Options type typ has the methods
// of kv.Options: EnsureDefaults(int) typ and Validate(int) error.
func checkShape(t *testing.T, protocol string, typ reflect.Type) {
	t.Helper()
	want := map[string]reflect.Type{
		"EnsureDefaults": reflect.FuncOf([]reflect.Type{typ, reflect.TypeFor[int]()}, []reflect.Type{typ}, false),
		"Validate":       reflect.FuncOf([]reflect.Type{typ, reflect.TypeFor[int]()}, []reflect.Type{reflect.TypeFor[error]()}, false),
	}
	for name, sig := range want {
		if m, ok := typ.MethodByName(name); !ok || m.Type != sig {
			t.Errorf("protocol %s: Options has no method %s of type %v", protocol, name, sig)
		}
	}
}

// TestTestingKnobsAreNoOptions: no protocol's TestingKnobs can be set by
// name, and knobs set leave the settings a store records, and so its
// fingerprint, as they were.
func TestTestingKnobsAreNoOptions(t *testing.T) {
	for _, name := range kv.Protocols() {
		p, _ := kv.Lookup(name)
		if p.Options == nil {
			continue
		}
		f, ok := reflect.TypeOf(p.Options).FieldByName("TestingKnobs")
		if !ok || !isKnobs(f) {
			t.Errorf("protocol %s: Options has no TestingKnobs struct", name)
			continue
		}
		if _, err := Parse(name, []string{"TestingKnobs=1"}); err == nil {
			t.Errorf("protocol %s: --opt TestingKnobs=1 accepted", name)
		}
		if slices.Contains(Names(name), "TestingKnobs") {
			t.Errorf("protocol %s: TestingKnobs listed as an option", name)
		}
		o := reflect.New(reflect.TypeOf(p.Options)).Elem()
		if setKnobs(o.FieldByName("TestingKnobs")) == 0 {
			t.Errorf("protocol %s: TestingKnobs has no pointer, integer or bool knob to set", name)
		}
		if got := Settings(o.Interface()); len(got) != 0 {
			t.Errorf("protocol %s: knobs set give settings %v; want none", name, got)
		}
	}
}

// setKnobs sets every pointer, integer and bool field of knobs to a value
// other than zero and returns how many it set.
func setKnobs(knobs reflect.Value) int {
	set := 0
	for i := range knobs.NumField() {
		switch f := knobs.Field(i); f.Kind() {
		case reflect.Pointer:
			f.Set(reflect.New(f.Type().Elem()))
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			f.SetInt(1)
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			f.SetUint(1)
		case reflect.Bool:
			f.SetBool(true)
		default:
			continue
		}
		set++
	}
	return set
}

// TestOptionList: types, defaults and whether a default is a constant
// come from each field's type and tags.
func TestOptionList(t *testing.T) {
	got := map[string]Option{}
	for _, o := range List("treebeard") {
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
	if o := List("oblivistore")[2]; o.Name != "EvictionRate" || o.Type != "number" || !o.Constant {
		t.Errorf("oblivistore's third option: %+v; want EvictionRate, a number with a constant default", o)
	}
	if List("plain") != nil || List("nosuch") != nil {
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
		o, err := Parse(tc.protocol, tc.args)
		if err != nil {
			t.Fatal(err)
		}
		if got := Settings(o); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Settings(Parse(%s, %q)) = %v; want %v", tc.protocol, tc.args, got, tc.want)
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
		o, err := Parse(tc.protocol, tc.args)
		if err != nil {
			t.Fatal(err)
		}
		got := Settings(o)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Settings(Parse(%s, %q)) = %v; want %v", tc.protocol, tc.args, got, tc.want)
		}
		back, err := Parse(tc.protocol, Args(got))
		if err != nil || !reflect.DeepEqual(back, o) {
			t.Errorf("%s: Parse(Args(%v)) = %#v, %v; want %#v", tc.protocol, got, back, err, o)
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
	if got := Args(map[string]string{"Z": "2", "K": "7"}); !slices.Equal(got, []string{"K=7", "Z=2"}) {
		t.Errorf("Args = %q; want sorted", got)
	}
}

// statsOf returns a store's protocol stats by name.
