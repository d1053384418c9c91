package journal

import (
	"context"
	"encoding/binary"
	"errors"
	"path/filepath"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/disk"
	"github.com/oblivkv/oblivkv/internal/durable"
)

// wantIncarnation checks the incarnation of an open journal.
func wantIncarnation(t *testing.T, j *Journal, want uint64) {
	t.Helper()
	if got := j.Incarnation(); got != want {
		t.Fatalf("incarnation %d, want %d", got, want)
	}
}

// Every Open is a new incarnation, one above the last, whether the last
// open was closed or crashed, and a failed Open does not spend one.
func TestIncarnationGrowsAtEveryOpen(t *testing.T) {
	dir, keys := t.TempDir(), newKeys(t)
	j := open(t, dir, keys)
	wantIncarnation(t, j, 1)
	commitN(t, j, 1, 3)
	j.Close()
	j = open(t, dir, keys)
	wantIncarnation(t, j, 2)
	j.Append(0, data(4)) // never written: lost in the crash
	j.Crash()
	if _, err := Open(dir, newKeys(t), Options{}); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("Open under another key = %v, want ErrWrongKey", err)
	}
	j = open(t, dir, keys)
	defer j.Close()
	wantIncarnation(t, j, 3)
	_, _, recs := recovered(j)
	wantRecords(t, recs, 1, 3)
}

// A journal written before incarnations were kept holds none: its first
// open counts from 0, and its records and checkpoint read as before.
func TestIncarnationOfAnOlderJournal(t *testing.T) {
	dir, keys := t.TempDir(), newKeys(t)
	j := open(t, dir, keys)
	commitN(t, j, 1, 4)
	if err := j.Checkpoint(context.Background(), 0, []byte("state"), 2); err != nil {
		t.Fatal(err)
	}
	j.Close()
	forgetIncarnation(t, dir)
	j = open(t, dir, keys)
	defer j.Close()
	wantIncarnation(t, j, 1)
	cp, at, recs := recovered(j)
	if string(cp) != "state" || at != 2 {
		t.Fatalf("checkpoint %q at %d, want state at 2", cp, at)
	}
	wantRecords(t, recs, 3, 4)
}

// forgetIncarnation deletes the incarnation of the closed journal in
// dir, as a build that kept none left it.
func forgetIncarnation(t *testing.T, dir string) {
	t.Helper()
	states, err := disk.Open(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	defer states.Close()
	if err := states.Delete(context.Background(), []string{incarnationAddr}); err != nil {
		t.Fatal(err)
	}
}

// A journal opened from a copy of its directory continues the copy's
// count: the original's next open and the copy's share an incarnation
// (the limit the durable package's doc states).
func TestCopiedJournalRepeatsAnIncarnation(t *testing.T) {
	dir, copied, keys := t.TempDir(), t.TempDir(), newKeys(t)
	j := open(t, dir, keys)
	j.Close()
	copyDir(t, dir, copied)
	j = open(t, dir, keys)
	defer j.Close()
	c := open(t, copied, keys)
	defer c.Close()
	wantIncarnation(t, j, 2)
	wantIncarnation(t, c, 2)
}

// An incarnation that does not open under the journal's key is
// corruption, never taken for a missing one.
func TestIncarnationTampered(t *testing.T) {
	dir, keys := t.TempDir(), newKeys(t)
	open(t, dir, keys).Close()
	states, err := disk.Open(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	vals, err := states.Read(context.Background(), []string{incarnationAddr})
	if err != nil || vals[0] == nil {
		t.Fatalf("the incarnation is not stored: %q, %v", vals, err)
	}
	vals[0][len(vals[0])-1] ^= 1
	if err := states.Write(context.Background(), []backend.Item{{Addr: incarnationAddr, Value: vals[0]}}); err != nil {
		t.Fatal(err)
	}
	states.Close()
	if _, err := Open(dir, keys, Options{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with a tampered incarnation = %v, want ErrCorrupt", err)
	}
}

// A journal opened as often as fencing tokens can count is refused, not
// given an incarnation its tokens could not carry.
func TestIncarnationLimit(t *testing.T) {
	dir, keys := t.TempDir(), newKeys(t)
	open(t, dir, keys).Close()
	states, err := disk.Open(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	last := keys.Seal(nil, incarnationAD, binary.BigEndian.AppendUint64(nil, durable.MaxIncarnation))
	if err := states.Write(context.Background(), []backend.Item{{Addr: incarnationAddr, Value: last}}); err != nil {
		t.Fatal(err)
	}
	states.Close()
	if j, err := Open(dir, keys, Options{}); err == nil {
		j.Close()
		t.Fatal("a journal past the most incarnations opened")
	}
}
