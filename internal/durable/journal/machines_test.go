package journal

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/oblivkv/oblivkv/backend/disk"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/internal/durable/sealedstate"
	"github.com/oblivkv/oblivkv/seal"
)

// lsnsOf returns the LSNs of machine m's records among recs.
func lsnsOf(recs []Record, m durable.MachineID) []uint64 {
	var out []uint64
	for _, r := range recs {
		if r.Machine == m {
			out = append(out, r.LSN)
		}
	}
	return out
}

// Machines checkpoint at positions of their own: a reopen gives each its
// latest checkpoint and its records after it, never another machine's;
// the log is dropped only below the first record some checkpoint does
// not cover, so a machine that has not checkpointed keeps its records.
func TestMachinesCheckpointApart(t *testing.T) {
	dir, keys, ctx := t.TempDir(), newKeys(t), t.Context()
	j := open(t, dir, keys)
	for i := 1; i <= 12; i++ { // machine 1 odd positions, machine 2 even
		if _, err := j.Commit(durable.MachineID(2-i%2), data(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Checkpoint(ctx, 1, []byte("one at 9"), 9); err != nil {
		t.Fatal(err)
	}
	j.Close()
	j = open(t, dir, keys)
	r := j.Recovered()
	if cp := r.Checkpoints[1]; string(cp.State) != "one at 9" || cp.At != 9 {
		t.Fatalf("machine 1's checkpoint %q at %d; want the one at 9", cp.State, cp.At)
	}
	if _, ok := r.Checkpoints[2]; ok {
		t.Fatal("machine 2 has a checkpoint it never took")
	}
	if got, want := lsnsOf(r.Records, 1), []uint64{11}; !slices.Equal(got, want) {
		t.Fatalf("machine 1's records after its checkpoint: %v; want %v", got, want)
	}
	if got, want := lsnsOf(r.Records, 2), []uint64{2, 4, 6, 8, 10, 12}; !slices.Equal(got, want) {
		t.Fatalf("machine 2's records: %v; want %v (its records below machine 1's checkpoint dropped)", got, want)
	}
	for _, rec := range r.Records {
		if !bytes.Equal(rec.Data, data(int(rec.LSN))) {
			t.Fatalf("record %d holds %q", rec.LSN, rec.Data)
		}
	}
	// Machine 2 checkpoints past machine 1's last record: the floor rises
	// to machine 1's first record after its checkpoint.
	if err := j.Checkpoint(ctx, 2, []byte("two at 12"), 12); err != nil {
		t.Fatal(err)
	}
	if j.floor != 10 {
		t.Fatalf("floor %d after machine 2's checkpoint at 12; want 10 (machine 1's record 11 is not covered)", j.floor)
	}
	if _, err := j.Commit(2, data(13)); err != nil {
		t.Fatal(err)
	}
	j.Close()
	j = open(t, dir, keys)
	defer j.Close()
	r = j.Recovered()
	if got := lsnsOf(r.Records, 1); !slices.Equal(got, []uint64{11}) {
		t.Fatalf("machine 1's records: %v; want [11]", got)
	}
	if got := lsnsOf(r.Records, 2); !slices.Equal(got, []uint64{13}) {
		t.Fatalf("machine 2's records: %v; want [13]", got)
	}
	segs, _ := listSegments(dir)
	if segs[0].first > 11 {
		t.Fatalf("the segment holding record 11 was dropped (first kept segment starts at %d)", segs[0].first)
	}
}

// A record's machine is sealed with it: a record whose machine is
// changed does not authenticate, and Open refuses the journal rather
// than hand the record to another machine.
func TestRecordMachineSealed(t *testing.T) {
	dir, keys := t.TempDir(), newKeys(t)
	j := open(t, dir, keys)
	for i := 1; i <= 3; i++ {
		if _, err := j.Commit(1, data(i)); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	segs, _ := listSegments(dir)
	b, _ := os.ReadFile(segs[0].path)
	binary.BigEndian.PutUint32(b[12:], 2) // record 1's machine
	n := int(binary.BigEndian.Uint32(b))
	binary.BigEndian.PutUint32(b[headerSize+n:], crc32.Checksum(b[:headerSize+n], castagnoli))
	os.WriteFile(segs[0].path, b, 0o600)
	if _, err := Open(dir, keys, Options{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with record 1 moved to machine 2: %v; want ErrCorrupt", err)
	}
}

// writeLegacyJournal writes, in dir, a journal as an earlier build left
// it: its identity, a checkpoint of the whole state at at in slot 0, and
// records from..to in one segment of that build's format.
func writeLegacyJournal(t *testing.T, dir string, keys *seal.Keys, state string, at uint64, from, to int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := checkIdent(dir, keys); err != nil {
		t.Fatal(err)
	}
	states, err := disk.Open(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	if err := saveCheckpoint(context.Background(), states, keys, legacySlotAddr(0), 1, at, []byte(state)); err != nil {
		t.Fatal(err)
	}
	states.Close()
	var seg []byte
	for i := from; i <= to; i++ {
		start := len(seg)
		seg = binary.BigEndian.AppendUint32(seg, uint32(len(data(i))+keys.Overhead()))
		seg = binary.BigEndian.AppendUint64(seg, uint64(i))
		seg = keys.Seal(seg, legacyAD(uint64(i)), data(i))
		seg = binary.BigEndian.AppendUint32(seg, crc32.Checksum(seg[start:], castagnoli))
	}
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf(legacySegmentName, from)), seg, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A journal of an earlier build opens as machine 0's: its checkpoint and
// records come back, records appended after it follow them, and its
// checkpoint slots are gone, so that build would refuse the journal as
// lost instead of missing the records appended since.
func TestEarlierBuildJournal(t *testing.T) {
	dir, keys, ctx := t.TempDir(), newKeys(t), t.Context()
	writeLegacyJournal(t, dir, keys, "state at 3", 3, 1, 6)
	j := open(t, dir, keys)
	cp, at, recs := recovered(j)
	if string(cp) != "state at 3" || at != 3 {
		t.Fatalf("checkpoint %q at %d; want the earlier build's at 3", cp, at)
	}
	wantRecords(t, recs, 4, 6)
	commitN(t, j, 7, 8)
	j.Close()
	j = open(t, dir, keys)
	cp, at, recs = recovered(j)
	if string(cp) != "state at 3" || at != 3 {
		t.Fatalf("after a reopen: checkpoint %q at %d", cp, at)
	}
	wantRecords(t, recs, 4, 8)
	if err := j.Checkpoint(ctx, 0, []byte("state at 8"), 8); err != nil {
		t.Fatal(err)
	}
	j.Close()
	states, err := disk.Open(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	defer states.Close()
	for slot := range 2 {
		if _, err := sealedstate.LoadBytes(ctx, states, keys, legacySlotAddr(slot)); !errors.Is(err, sealedstate.ErrUnclean) {
			t.Errorf("the earlier build's checkpoint slot %d is still there: %v", slot, err)
		}
	}
	if segs, _ := listSegments(dir); len(segs) == 0 || segs[0].legacy {
		t.Errorf("the earlier build's segment is kept after a checkpoint covering it: %+v", segs)
	}
}
