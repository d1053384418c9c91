package journal

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/oblivkv/oblivkv/seal"
)

// TestReseal: a journal re-sealed under new keys recovers the same
// checkpoint and records under them, continues its incarnations, refuses
// the old keys, and leaves the original as it was; a torn tail is dropped
// as Open drops it.
func TestReseal(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "new")
	from, to := newKeys(t), newKeys(t)
	j := open(t, src, from)
	commitN(t, j, 1, 10)
	if err := j.Checkpoint(t.Context(), 0, []byte("state at 6"), 6); err != nil {
		t.Fatal(err)
	}
	commitN(t, j, 11, 12)
	incarnation := j.Incarnation()
	j.Close()
	segs, _ := listSegments(src)
	tail, err := os.OpenFile(segs[len(segs)-1].path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	tail.Write([]byte{0, 0, 0, 9, 1, 2}) // a record a crash cut short
	tail.Close()

	if err := Reseal(t.Context(), src, dst, from, to); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dst, from, Options{}); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("the re-sealed journal under the old keys: %v, want ErrWrongKey", err)
	}
	checkResealed(t, dst, to, incarnation+1)
	checkResealed(t, src, from, incarnation+1)
}

// checkResealed opens the journal in dir under keys: it holds TestReseal's
// checkpoint and records, at incarnation.
func checkResealed(t *testing.T, dir string, keys *seal.Keys, incarnation uint64) {
	t.Helper()
	j := open(t, dir, keys)
	defer j.Close()
	cp, at, recs := recovered(j)
	if string(cp) != "state at 6" || at != 6 {
		t.Fatalf("%s: checkpoint %q at %d", dir, cp, at)
	}
	wantRecords(t, recs, 7, 12)
	if j.Incarnation() != incarnation {
		t.Fatalf("%s: incarnation %d, want %d", dir, j.Incarnation(), incarnation)
	}
}

// TestResealRefusesWrongKey: a journal the old keys do not open is
// refused, and nothing is written.
func TestResealRefusesWrongKey(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "new")
	j := open(t, src, newKeys(t))
	commitN(t, j, 1, 3)
	j.Close()
	if err := Reseal(t.Context(), src, dst, newKeys(t), newKeys(t)); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("Reseal under a wrong key: %v", err)
	}
	if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Reseal under a wrong key made %s: %v", dst, err)
	}
}
