package journal

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/oblivkv/oblivkv/seal"
)

// segPath is the path of the segment of dir whose first record is first.
func segPath(dir string, first uint64) string {
	return filepath.Join(dir, fmt.Sprintf(segmentName, first))
}

// inodeAndSize returns the inode number and the size of the file at path.
func inodeAndSize(t *testing.T, path string) (uint64, int64) {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Sys().(*syscall.Stat_t).Ino, info.Size()
}

// checkpoint checkpoints machine 0 at at.
func checkpoint(t *testing.T, j *Journal, at uint64) {
	t.Helper()
	if err := j.Checkpoint(t.Context(), 0, fmt.Appendf(nil, "state at %d", at), at); err != nil {
		t.Fatal(err)
	}
}

// recordSize is the encoded size of record i of data(i).
func recordSize(keys *seal.Keys, i int) int {
	return headerSize + len(data(i)) + keys.Overhead() + trailerSize
}

// recycledJournal writes, in dir, a journal whose last segment, from
// record 42, was started in the file of the segment that held records
// 1..40: it holds records 42..44 over the stale records of that file,
// which it returns as it was before record 42 was written. The journal's
// checkpoint is at 41, and record 41's segment waits as a free file.
func recycledJournal(t *testing.T, dir string, keys *seal.Keys) (*Journal, []byte) {
	t.Helper()
	j := open(t, dir, keys)
	commitN(t, j, 1, 40)
	checkpoint(t, j, 40) // starts segment 41, drops segment 1
	commitN(t, j, 41, 41)
	checkpoint(t, j, 41) // starts segment 42 in segment 1's file
	if st := j.Stats(); st.SegmentsReused != 1 {
		t.Fatalf("%d segments reused, want 1", st.SegmentsReused)
	}
	stale, err := os.ReadFile(segPath(dir, 42))
	if err != nil {
		t.Fatal(err)
	}
	commitN(t, j, 42, 44)
	if written := recordSize(keys, 42) + recordSize(keys, 43) + recordSize(keys, 44); len(stale) <= written {
		t.Fatalf("the recycled file holds %d bytes, no more than the %d written over it", len(stale), written)
	}
	return j, stale
}

// A checkpoint's new segment takes a dropped segment's file, renamed, not
// truncated nor made anew; however many segments come and go, the log
// keeps few files.
func TestSegmentsRecycled(t *testing.T) {
	dir, keys := t.TempDir(), newKeys(t)
	j := open(t, dir, keys)
	defer j.Close()
	commitN(t, j, 1, 20)
	ino, size := inodeAndSize(t, segPath(dir, 1))
	checkpoint(t, j, 20) // starts segment 21, drops segment 1
	commitN(t, j, 21, 22)
	checkpoint(t, j, 22) // starts segment 23 in segment 1's file
	if gotIno, gotSize := inodeAndSize(t, segPath(dir, 23)); gotIno != ino || gotSize != size {
		t.Fatalf("segment 23 is inode %d of %d bytes; want segment 1's file, inode %d of %d bytes", gotIno, gotSize, ino, size)
	}
	if st := j.Stats(); st.SegmentsReused != 1 {
		t.Fatalf("%d segments reused, want 1", st.SegmentsReused)
	}
	for i := 23; i < 123; i += 5 {
		commitN(t, j, i, i+4)
		checkpoint(t, j, uint64(i+4))
		segs, free, _ := listDir(dir)
		if len(segs)+len(free) > 2 {
			t.Fatalf("after the checkpoint at %d: %d segments and %d free files, want 2 files at most", i+4, len(segs), len(free))
		}
	}
	if st := j.Stats(); st.SegmentsReused != 21 {
		t.Fatalf("%d segments reused, want 21 (every checkpoint's but the first)", st.SegmentsReused)
	}
}

// Of many segments dropped at once, the largest recycleFiles are kept
// for reuse and the others deleted.
func TestRecycleKeepsTheLargest(t *testing.T) {
	dir, keys := t.TempDir(), newKeys(t)
	j := open(t, dir, keys)
	defer j.Close()
	if _, err := j.Commit(1, data(1)); err != nil { // holds the floor at 0
		t.Fatal(err)
	}
	var last uint64
	for _, n := range []int{3, 9, 1, 7, 5, 2} {
		for range n {
			var err error
			if last, err = j.Commit(0, data(int(last))); err != nil {
				t.Fatal(err)
			}
		}
		checkpoint(t, j, last)
	}
	segs, _ := listSegments(dir)
	var sizes []int64
	for _, s := range segs[:len(segs)-1] {
		_, size := inodeAndSize(t, s.path)
		sizes = append(sizes, size)
	}
	if err := j.Checkpoint(t.Context(), 1, nil, 1); err != nil { // the floor rises to the last record
		t.Fatal(err)
	}
	_, free, _ := listDir(dir)
	var kept []int64
	for _, f := range free {
		_, size := inodeAndSize(t, f.path)
		kept = append(kept, size)
	}
	slices.SortFunc(sizes, func(a, b int64) int { return cmp.Compare(b, a) })
	if !slices.Equal(kept, sizes[:recycleFiles]) {
		t.Fatalf("free files of %v bytes kept of segments of %v bytes dropped; want the %d largest", kept, sizes, recycleFiles)
	}
	if segs, _ := listSegments(dir); len(segs) != 1 {
		t.Fatalf("%d segments after every record was checkpointed, want 1", len(segs))
	}
}

// crashReopen crashes j and reopens the journal in dir (openRecovering).
func crashReopen(t *testing.T, j *Journal, dir string, keys *seal.Keys, from, to int) *Journal {
	t.Helper()
	j.Crash()
	return openRecovering(t, dir, keys, from, to)
}

// A segment written over a recycled file holds the older segment's
// records after its own: after a crash exactly the records committed come
// back, in order, whether that segment is the last or not.
func TestStaleTailRecovers(t *testing.T) {
	dir, keys := t.TempDir(), newKeys(t)
	j, _ := recycledJournal(t, dir, keys)
	j = crashReopen(t, j, dir, keys, 42, 44) // starts segment 45 in record 41's file
	if st := j.Stats(); st.SegmentsReused != 1 {
		t.Fatalf("%d segments reused at open, want 1", st.SegmentsReused)
	}
	commitN(t, j, 45, 46)
	crashReopen(t, j, dir, keys, 42, 46).Close()
}

// A crash after a recycled file became the new segment, before any
// record went into it: the segment holds only stale records, the journal
// reopens with the records committed, and goes on writing over that
// segment's file.
func TestCrashBeforeRecycledSegmentWritten(t *testing.T) {
	dir, keys := t.TempDir(), newKeys(t)
	j := open(t, dir, keys)
	commitN(t, j, 1, 30)
	checkpoint(t, j, 30) // starts segment 31, drops segment 1
	commitN(t, j, 31, 33)
	checkpoint(t, j, 31) // starts segment 34 in segment 1's file
	ino, size := inodeAndSize(t, segPath(dir, 34))
	j = crashReopen(t, j, dir, keys, 32, 33)
	commitN(t, j, 34, 35)
	if gotIno, gotSize := inodeAndSize(t, segPath(dir, 34)); gotIno != ino || gotSize != size {
		t.Fatalf("segment 34 is inode %d of %d bytes after the reopen; want inode %d of %d bytes, written over", gotIno, gotSize, ino, size)
	}
	crashReopen(t, j, dir, keys, 32, 35).Close()
}

// In a segment written over a recycled file, a bad record with committed
// records after it is ErrCorrupt, in the last segment and in one before
// it, as is a bad record before the next segment's first; a torn last
// record (its first bytes written, the rest the stale bytes it was
// written over) is dropped.
func TestRecycledSegmentCorruption(t *testing.T) {
	dir, keys := t.TempDir(), newKeys(t)
	j, stale := recycledJournal(t, dir, keys)
	j.Close()
	seg := segPath(dir, 42)
	whole, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	at44 := recordSize(keys, 42) + recordSize(keys, 43)
	variant := func(t *testing.T, base string, b []byte) string {
		t.Helper()
		d := t.TempDir()
		copyDir(t, base, d)
		if err := os.WriteFile(filepath.Join(d, filepath.Base(seg)), b, 0o600); err != nil {
			t.Fatal(err)
		}
		return d
	}
	flipped := func(at int) []byte {
		b := bytes.Clone(whole)
		b[at] ^= 1
		return b
	}
	if _, err := Open(variant(t, dir, flipped(headerSize+3)), keys, Options{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with record 42 of 42..44 corrupted in the last segment: %v; want ErrCorrupt", err)
	}
	end44 := at44 + recordSize(keys, 44)
	for _, cut := range []int{1, headerSize + 1, recordSize(keys, 44) - 1} {
		torn := append(bytes.Clone(whole[:at44+cut]), stale[at44+cut:]...)
		if bytes.Equal(torn[at44:end44], whole[at44:end44]) { // the stale bytes happened to be the record's own (1 in 256 for the last byte alone)
			torn[end44-1] ^= 1
		}
		j, err := Open(variant(t, dir, torn), keys, Options{})
		if err != nil {
			t.Fatalf("record 44 torn after %d bytes: %v", cut, err)
		}
		_, _, recs := recovered(j)
		wantRecords(t, recs, 42, 43)
		if lsn, err := j.Commit(0, data(44)); err != nil || lsn != 44 {
			t.Fatalf("record 44 torn after %d bytes: the next commit is %d, %v; want 44", cut, lsn, err)
		}
		j.Close()
	}

	// Segment 42 followed by another that holds no record yet: a bad
	// record in segment 42 is corruption even with no record after it,
	// as segment 42 must run up to segment 45.
	open(t, dir, keys).Close()
	if whole, err = os.ReadFile(seg); err != nil {
		t.Fatal(err)
	}
	for _, at := range []int{headerSize + 3, at44 + headerSize + 3} {
		if _, err := Open(variant(t, dir, flipped(at)), keys, Options{}); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Open with byte %d of segment 42 of 42..44 corrupted, before an empty segment 45: %v; want ErrCorrupt", at, err)
		}
	}
}

// recordsUnder counts the places in the files under dir where a whole
// record sealed under keys, of an LSN from 1 to last, starts.
func recordsUnder(t *testing.T, dir string, keys *seal.Keys, last uint64) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		for off := 0; off+headerSize <= len(b); off++ {
			if lsn := binary.BigEndian.Uint64(b[off+4:]); lsn < 1 || lsn > last {
				continue
			}
			if _, _, ok := parseRecord(b[off:], keys, false); ok {
				n++
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A journal whose segments were written over recycled files, and which
// keeps free files, re-sealed under new keys: no file of the new
// directory holds a record the old keys open (the old directory's stale
// tails and free files hold many), and it opens under the new keys with
// the checkpoint and every record after it.
func TestResealLeavesNoStaleRecords(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "new")
	from, to := newKeys(t), newKeys(t)
	j, _ := recycledJournal(t, src, from)
	j.Close()
	if _, free, _ := listDir(src); len(free) == 0 {
		t.Fatal("the journal keeps no free file: the test shows nothing")
	}
	if n := recordsUnder(t, src, from, 44); n <= 3 {
		t.Fatalf("%d records under the old keys in the original, want its stale ones too", n)
	}
	if err := Reseal(t.Context(), src, dst, from, to); err != nil {
		t.Fatal(err)
	}
	if n := recordsUnder(t, dst, from, 44); n != 0 {
		t.Fatalf("the re-sealed journal holds %d records under the old keys", n)
	}
	if n := recordsUnder(t, dst, to, 44); n != 3 {
		t.Fatalf("the re-sealed journal holds %d records under the new keys, want 3", n)
	}
	openRecovering(t, dst, to, 42, 44).Close()
}
