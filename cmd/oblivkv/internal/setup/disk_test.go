package setup

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/oblivkv/oblivkv/backend/disk"
	"github.com/oblivkv/oblivkv/backend/slots"
	"github.com/oblivkv/oblivkv/kv"
)

// A new disk store gets the engine asked for (by default slots for an
// oblivious protocol, pebble for a baseline), and an existing store opens
// on the engine it was made with, whatever is asked.
func TestDiskEngines(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ protocol, made, asked, want string }{
		{"", "", "", EngineSlots},
		{"", "", EngineAuto, EngineSlots},
		{"plain", "", EngineAuto, EnginePebble},
		{"encrypted", "", "", EnginePebble},
		{"plain", "", EngineSlots, EngineSlots},
		{"", "", EnginePebble, EnginePebble},
		{"", EnginePebble, EngineSlots, EnginePebble},
		{"", EngineSlots, EnginePebble, EngineSlots},
	} {
		t.Run(fmt.Sprintf("%s made %q, asked %q", tc.protocol, tc.made, tc.asked), func(t *testing.T) {
			dataDir := t.TempDir()
			if tc.made != "" {
				o, err := Open(ctx, Options{DataDir: dataDir, Protocol: tc.protocol, Capacity: 16, ValueSize: 16, DiskEngine: tc.made})
				if err != nil {
					t.Fatal(err)
				}
				o.Close()
			}
			o, err := Open(ctx, Options{DataDir: dataDir, Protocol: tc.protocol, Capacity: 16, ValueSize: 16, DiskEngine: tc.asked})
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			if got, _ := StoreEngine(filepath.Join(dataDir, "store")); got != tc.want {
				t.Fatalf("the store is on %q, want %q", got, tc.want)
			}
			b, err := openDisk(filepath.Join(t.TempDir(), "probe"), diskOptions{engine: tc.want})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if _, isSlots := b.(*slots.Backend); isSlots != (tc.want == EngineSlots) {
				t.Fatalf("engine %s opened a %T", tc.want, b)
			}
			if _, isPebble := b.(*disk.Backend); isPebble != (tc.want == EnginePebble) {
				t.Fatalf("engine %s opened a %T", tc.want, b)
			}
			if !hasStat(o.Store.Stats().Extra, kv.StatDiskBytes) {
				t.Errorf("the stats of a disk store lack %s", kv.StatDiskBytes)
			}
		})
	}
}

func hasStat(stats []kv.Stat, name string) bool {
	for _, s := range stats {
		if s.Name == name {
			return true
		}
	}
	return false
}
