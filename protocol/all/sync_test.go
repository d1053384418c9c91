package all_test

import (
	"testing"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
)

// kv.Open lets storage skip the sync of each write (backend.DeferSync)
// exactly for the protocols whose journal holds every write they issue
// (each shows it survives a power cut so: TestPowerLoss in its package),
// and only under --fsync always with a journal: never for the baselines,
// a store without a journal, or --fsync none (where storage does not sync
// anyway).
func TestStorageSyncDeferredOnlyWhenJournaled(t *testing.T) {
	keys := kvtest.NewKeys(t)
	for _, tc := range []struct {
		protocol string
		journal  bool
		noFsync  bool
		want     bool
	}{
		{"pathoram", true, false, true},
		{"taostore", true, false, true},
		{"treebeard", true, false, true},
		{"waffle", true, false, true},
		{"cloak", true, false, true},
		{"cloak", false, false, false},
		{"oblivistore", true, false, true},
		{"oblivistore", false, false, false},
		{"plain", true, false, false},
		{"encrypted", true, false, false},
		{"treebeard", false, false, false},
		{"treebeard", true, true, false},
	} {
		v := kvtest.NewVolatile()
		cfg := kv.Config{Protocol: tc.protocol, Backend: v, Keys: keys, Capacity: 64, ValueSize: 16, NoFsync: tc.noFsync}
		if tc.journal {
			cfg.OpenJournal = kvtest.Journal(t.TempDir())
		}
		s, err := kv.Open(t.Context(), cfg)
		if err != nil {
			t.Fatalf("%s: %v", tc.protocol, err)
		}
		if got := v.Deferred(); got != tc.want {
			t.Errorf("%s (journal %v, no fsync %v): sync deferred %v, want %v", tc.protocol, tc.journal, tc.noFsync, got, tc.want)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
