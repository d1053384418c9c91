package audit_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/bench/workload"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/observe"
	_ "github.com/oblivkv/oblivkv/protocol/baseline"
)

const (
	strawmanKeys  = 1000
	strawmanReads = 20000
	valueMarker   = "PLAINTEXT-VALUE-"
)

// strawman is an "encrypted" store over memory whose every backend call is
// logged, loaded with strawmanKeys keys whose values carry valueMarker.
type strawman struct {
	store kv.Store
	log   *observe.MemoryLog
	mem   *mem.Backend
	keys  []string // by popularity rank: keys[0] is the hottest
}

func newStrawman(t *testing.T, sink observe.Sink) *strawman {
	t.Helper()
	keys := kvtest.NewKeys(t)
	s := &strawman{log: &observe.MemoryLog{}, mem: mem.New()}
	var tapSink observe.Sink = s.log
	if sink != nil {
		tapSink = teeSink{s.log, sink}
	}
	var err error
	s.store, err = kv.Open(context.Background(), kv.Config{Protocol: "encrypted", Backend: s.mem,
		Keys: keys, Capacity: strawmanKeys, TapLog: tapSink})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.store.Close() })
	for i := range strawmanKeys {
		k := fmt.Sprintf("patient:%04d", i)
		s.keys = append(s.keys, k)
		if err := s.store.Put(t.Context(), k, []byte(fmt.Sprintf("%s%04d", valueMarker, i))); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

type teeSink []observe.Sink

func (t teeSink) Record(r observe.Record) error {
	for _, s := range t {
		if err := s.Record(r); err != nil {
			return err
		}
	}
	return nil
}

// truth learns each key's storage address the way a test may (not the
// attacker): one Get per key, reading the address of the call it makes.
func (s *strawman) truth(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, k := range s.keys {
		s.log.Reset()
		if _, _, err := s.store.Get(t.Context(), k); err != nil {
			t.Fatal(err)
		}
		recs := s.log.Records()
		if len(recs) != 1 || len(recs[0].Addrs) != 1 {
			t.Fatalf("a Get of encrypted made %d backend calls; want 1 call of 1 address", len(recs))
		}
		out[k] = recs[0].Addrs[0]
	}
	s.log.Reset()
	return out
}

// readRanks performs strawmanReads Gets of the keys at ranks drawn by next.
func (s *strawman) readRanks(t *testing.T, next func() uint64) {
	t.Helper()
	for range strawmanReads {
		if _, _, err := s.store.Get(t.Context(), s.keys[next()]); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEncryptedLeaksFrequency shows the strawman every paper attacks: with
// "encrypted" under a Zipf 0.99 workload, the hottest key's storage address
// dominates the adversary's view, and an attacker who knows the popularity
// ranking recovers the hottest keys, while no value ever appears in the log.
func TestEncryptedLeaksFrequency(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "encrypted.tap")
	file, err := observe.CreateFileLog(logPath)
	if err != nil {
		t.Fatal(err)
	}
	s := newStrawman(t, file)
	truth := s.truth(t)
	z, err := workload.NewZipfian(strawmanKeys, 0.99)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	s.readRanks(t, func() uint64 { return z.Next(r) })

	ranked := audit.RankAddresses(s.log.Records(), observe.OpRead)
	if ranked[0].Addr != truth[s.keys[0]] {
		t.Fatalf("most read address %q is not the hottest key's %q", ranked[0].Addr, truth[s.keys[0]])
	}
	share := float64(ranked[0].Count) / strawmanReads
	uniformShare := 1.0 / strawmanKeys
	t.Logf("hottest address: %.1f%% of reads (theory %.1f%%; uniform would be %.2f%%)", 100*share, 100*z.TopShare(), 100*uniformShare)
	if share < 0.8*z.TopShare() || share < 50*uniformShare {
		t.Fatalf("hottest address has %.2f%% of reads; want close to the Zipf top share %.2f%%", 100*share, 100*z.TopShare())
	}
	guess := audit.FrequencyAttack(ranked, s.keys)
	top3, top10 := audit.Recovered(guess, s.keys, truth, 3), audit.Recovered(guess, s.keys, truth, 10)
	t.Logf("frequency attack recovers %.0f%% of the top 3 keys and %.0f%% of the top 10", 100*top3, 100*top10)
	if top3 < 1 || top10 < 0.6 {
		t.Fatalf("frequency attack recovered %.0f%% of the top 3 and %.0f%% of the top 10; the leak should give most", 100*top3, 100*top10)
	}
	if err := file.Close(); err != nil {
		t.Fatal(err)
	}
	assertNoPlaintext(t, s, logPath)
}

// TestEncryptedUniformHasNoDominantAddress is the control: the same
// attack on uniform traffic finds no address that stands out, so the
// dominance above comes from the workload's skew, leaked through storage.
func TestEncryptedUniformHasNoDominantAddress(t *testing.T) {
	s := newStrawman(t, nil)
	truth := s.truth(t)
	r := rand.New(rand.NewPCG(3, 4))
	s.readRanks(t, func() uint64 { return r.Uint64N(strawmanKeys) })
	ranked := audit.RankAddresses(s.log.Records(), observe.OpRead)
	share := float64(ranked[0].Count) / strawmanReads
	if share > 5.0/strawmanKeys {
		t.Fatalf("under uniform traffic the most read address has %.2f%% of reads", 100*share)
	}
	guess := audit.FrequencyAttack(ranked, s.keys)
	if got := audit.Recovered(guess, s.keys, truth, 100); got > 0.1 {
		t.Fatalf("frequency attack recovered %.0f%% of 100 keys from uniform traffic; want about chance", 100*got)
	}
}

// assertNoPlaintext checks that neither the adversary's log (in memory and
// on disk) nor the storage holds a value or a key in the clear.
func assertNoPlaintext(t *testing.T, s *strawman, logPath string) {
	t.Helper()
	raw, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) == 0 || bytes.Contains(raw, []byte(valueMarker)) || bytes.Contains(raw, []byte("patient:")) {
		t.Fatalf("the tap log file (%d bytes) is empty or holds plaintext", len(raw))
	}
	for _, rec := range s.log.Records() {
		for _, a := range rec.Addrs {
			if strings.Contains(a, valueMarker) || strings.Contains(a, "patient:") {
				t.Fatalf("record %d holds plaintext in address %q", rec.Seq, a)
			}
		}
	}
	err = s.mem.Scan(context.Background(), "", func(addr string) error {
		vals, err := s.mem.Read(context.Background(), []string{addr})
		if err == nil && bytes.Contains(vals[0], []byte(valueMarker)) {
			err = fmt.Errorf("storage holds a plaintext value at %q", addr)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
