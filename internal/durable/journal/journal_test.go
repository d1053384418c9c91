package journal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/disk"
	"github.com/oblivkv/oblivkv/seal"
)

// copyDir copies the files of the directory tree src into dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func newKeys(t testing.TB) *seal.Keys {
	t.Helper()
	master, err := seal.GenerateMaster()
	if err != nil {
		t.Fatal(err)
	}
	k, err := seal.NewKeys(master)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func open(t *testing.T, dir string, keys *seal.Keys) *Journal {
	t.Helper()
	j, err := Open(dir, keys, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func data(i int) []byte {
	return []byte(fmt.Sprintf("record %d %s", i, bytes.Repeat([]byte{byte(i)}, i%50)))
}

// commitN commits records from..to (inclusive) and checks their LSNs.
func commitN(t *testing.T, j *Journal, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		lsn, err := j.Commit(0, data(i))
		if err != nil || lsn != uint64(i) {
			t.Fatalf("Commit(record %d) = %d, %v", i, lsn, err)
		}
	}
}

// recovered returns what Open found of machine 0: its checkpoint (nil
// when none) and position, and every record.
func recovered(j *Journal) ([]byte, uint64, []Record) {
	r := j.Recovered()
	cp := r.Checkpoints[0]
	return cp.State, cp.At, r.Records
}

// wantRecords checks that recs are records from..to, in order.
func wantRecords(t *testing.T, recs []Record, from, to int) {
	t.Helper()
	if len(recs) != to-from+1 {
		t.Fatalf("%d records recovered, want %d (%d..%d)", len(recs), to-from+1, from, to)
	}
	for i, r := range recs {
		if n := from + i; r.LSN != uint64(n) || !bytes.Equal(r.Data, data(n)) {
			t.Fatalf("record %d: LSN %d, %q; want %d, %q", i, r.LSN, r.Data, n, data(n))
		}
	}
}

// openRecovering opens the journal in dir and checks it recovers
// machine 0's checkpoint at from-1, saved as "state at from-1", and
// records from..to.
func openRecovering(t *testing.T, dir string, keys *seal.Keys, from, to int) *Journal {
	t.Helper()
	j := open(t, dir, keys)
	cp, at, recs := recovered(j)
	if want := fmt.Sprint("state at ", from-1); string(cp) != want || at != uint64(from-1) {
		t.Fatalf("checkpoint %q at %d; want %q", cp, at, want)
	}
	wantRecords(t, recs, from, to)
	return j
}

// Records committed come back in order after a reopen, and appends go on
// from the next LSN.
func TestRoundTrip(t *testing.T) {
	dir, keys := t.TempDir(), newKeys(t)
	j := open(t, dir, keys)
	if cp, at, recs := recovered(j); cp != nil || at != 0 || len(recs) != 0 {
		t.Fatalf("a new journal recovered %d bytes of checkpoint at %d and %d records", len(cp), at, len(recs))
	}
	commitN(t, j, 1, 20)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j = open(t, dir, keys)
	_, _, recs := recovered(j)
	wantRecords(t, recs, 1, 20)
	commitN(t, j, 21, 25)
	j.Close()
	j = open(t, dir, keys)
	defer j.Close()
	_, _, recs = recovered(j)
	wantRecords(t, recs, 1, 25)
}

// A checkpoint replaces the records it covers: a reopen finds it and only
// the records after it, and the segments it covers are gone.
func TestCheckpoint(t *testing.T) {
	dir, keys := t.TempDir(), newKeys(t)
	j := open(t, dir, keys)
	commitN(t, j, 1, 10)
	if err := j.Checkpoint(t.Context(), 0, []byte("state at 10"), 10); err != nil {
		t.Fatal(err)
	}
	commitN(t, j, 11, 15)
	if err := j.Checkpoint(t.Context(), 0, []byte("state at 13"), 13); err != nil {
		t.Fatal(err)
	}
	j.Close()
	j = open(t, dir, keys)
	cp, at, recs := recovered(j)
	if string(cp) != "state at 13" || at != 13 {
		t.Fatalf("checkpoint %q at %d; want the second", cp, at)
	}
	wantRecords(t, recs, 14, 15)
	segs, _ := listSegments(dir)
	for _, s := range segs[:len(segs)-1] {
		if s.first <= 10 {
			t.Errorf("segment %s from record %d kept after a checkpoint at 13", filepath.Base(s.path), s.first)
		}
	}
	if st := j.Stats(); st.Records != 0 {
		t.Errorf("stats after open: %+v", st)
	}
	j.Close()
}

// Of checkpoints at one position (a state that changed with no record,
// as a store's trees written at its first access), a reopen finds the
// last, whichever slot it is in.
func TestCheckpointsAtOnePosition(t *testing.T) {
	for n := 2; n <= 3; n++ {
		dir, keys := t.TempDir(), newKeys(t)
		j := open(t, dir, keys)
		for i := range n {
			if err := j.Checkpoint(t.Context(), 0, fmt.Appendf(nil, "state %d", i), 0); err != nil {
				t.Fatal(err)
			}
		}
		j.Close()
		j = open(t, dir, keys)
		if cp, at, _ := recovered(j); string(cp) != fmt.Sprint("state ", n-1) || at != 0 {
			t.Errorf("after %d checkpoints at 0: reopened %q at %d; want the last", n, cp, at)
		}
		j.Close()
	}
}

// A checkpoint torn by a crash (its slot's chunk rewritten, its header
// not yet) is not read: the other slot's checkpoint, and the log after it,
// which a checkpoint drops only once written, recover the state.
func TestTornCheckpoint(t *testing.T) {
	dir, keys := t.TempDir(), newKeys(t)
	j := open(t, dir, keys)
	for _, at := range []int{5, 7, 9} { // slots 0, 1, 0
		commitN(t, j, int(j.Last())+1, at)
		if err := j.Checkpoint(t.Context(), 0, fmt.Appendf(nil, "state at %d", at), uint64(at)); err != nil {
			t.Fatal(err)
		}
	}
	commitN(t, j, 10, 12)
	j.Close()
	// The next checkpoint would go to slot 1 (holding the one at 7): its
	// first chunk rewritten, then the crash.
	st, err := disk.Open(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := slotAddr(0, 1) + "/0"
	if err := st.Write(t.Context(), []backend.Item{{Addr: chunk, Value: keys.Seal(nil, []byte(chunk), []byte("half of a new state"))}}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	openRecovering(t, dir, keys, 10, 12).Close()
}

// Every cut of the last record (a crash in the middle of its write) and
// every corrupted byte of it recovers exactly the records before it, and
// appending continues at its LSN.
func TestTornTail(t *testing.T) {
	dir, keys := t.TempDir(), newKeys(t)
	j := open(t, dir, keys)
	commitN(t, j, 1, 7)
	before := j.Stats().Bytes
	commitN(t, j, 8, 8)
	j.Close()
	segs, _ := listSegments(dir)
	seg := segs[0]
	whole, err := os.ReadFile(seg.path)
	if err != nil {
		t.Fatal(err)
	}
	start := int(before) // the last record's first byte
	if start >= len(whole) {
		t.Fatalf("segment of %d bytes, last record at %d", len(whole), start)
	}
	check := func(t *testing.T, name string, b []byte) {
		t.Helper()
		d := t.TempDir()
		copyDir(t, dir, d)
		if err := os.WriteFile(filepath.Join(d, filepath.Base(seg.path)), b, 0o600); err != nil {
			t.Fatal(err)
		}
		j, err := Open(d, keys, Options{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer j.Close()
		_, _, recs := recovered(j)
		wantRecords(t, recs, 1, 7)
		if lsn, err := j.Commit(0, data(8)); err != nil || lsn != 8 {
			t.Fatalf("%s: the next commit is %d, %v; want 8", name, lsn, err)
		}
	}
	for cut := start; cut < len(whole); cut++ {
		check(t, fmt.Sprintf("cut at byte %d", cut), whole[:cut])
	}
	for i := start; i < len(whole); i++ {
		b := bytes.Clone(whole)
		b[i] ^= 0x40
		check(t, fmt.Sprintf("byte %d flipped", i), b)
	}
	// Garbage after the last whole record (a file extended with zeros by
	// a crash) is a torn tail too.
	check(t, "zeros appended", append(bytes.Clone(whole[:start]), make([]byte, 100)...))
}

// A bad record followed by good ones is not a torn tail: it is corruption
// of acknowledged records, and Open refuses it.
func TestCorruptMiddle(t *testing.T) {
	dir, keys := t.TempDir(), newKeys(t)
	j := open(t, dir, keys)
	commitN(t, j, 1, 5)
	j.Close()
	segs, _ := listSegments(dir)
	b, _ := os.ReadFile(segs[0].path)
	b[headerSize+3] ^= 1 // inside record 1's sealed data
	os.WriteFile(segs[0].path, b, 0o600)
	if _, err := Open(dir, keys, Options{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with record 1 of 5 corrupted: %v; want ErrCorrupt", err)
	}
}

// A journal opened with another key is refused, and keeps its records.
func TestWrongKey(t *testing.T) {
	dir, keys := t.TempDir(), newKeys(t)
	j := open(t, dir, keys)
	commitN(t, j, 1, 3)
	j.Close()
	if _, err := Open(dir, newKeys(t), Options{}); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("Open with another key: %v; want ErrWrongKey", err)
	}
	j = open(t, dir, keys)
	defer j.Close()
	_, _, recs := recovered(j)
	wantRecords(t, recs, 1, 3)
}

// Concurrent commits share fsyncs: every record is durable when its
// Commit returns, in far fewer groups than records.
func TestGroupCommit(t *testing.T) {
	dir, keys := t.TempDir(), newKeys(t)
	j := open(t, dir, keys)
	const writers, each = 32, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if _, err := j.Commit(0, fmt.Appendf(nil, "w%d-%d", w, i)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	st := j.Stats()
	t.Logf("%d records in %d fsyncs", st.Records, st.Fsyncs)
	if st.Records != writers*each || st.Groups >= st.Records || st.Fsyncs != st.Groups {
		t.Fatalf("stats %+v: want %d records in fewer groups", st, writers*each)
	}
	j.Close()
	j = open(t, dir, keys)
	defer j.Close()
	if _, _, recs := recovered(j); len(recs) != writers*each {
		t.Fatalf("%d records recovered, want %d", len(recs), writers*each)
	}
}

// A commit lets the writers ready to run append before its group is
// written: on one processor, a writer started just before another's
// Commit shares its fsync. Without the yield the group is taken before
// that writer runs, every time; with it the scheduler's fairness check
// (one pick in 61 goes to the global queue) can still run the first
// writer again at once, so most trials, not all, must share.
func TestCommitGathersWritersReady(t *testing.T) {
	j := open(t, t.TempDir(), newKeys(t))
	defer j.Close()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const trials = 20
	shared := 0
	for i := range trials {
		before := j.Stats().Fsyncs
		done := make(chan error)
		go func() { _, err := j.Commit(0, data(2*i+1)); done <- err }()
		if _, err := j.Commit(0, data(2*i)); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if j.Stats().Fsyncs == before+1 {
			shared++
		}
	}
	if shared < trials/2 {
		t.Fatalf("two writers shared an fsync in %d of %d trials", shared, trials)
	}
}

// One process at a time: a second Open of a journal in use is refused,
// and a crashed journal's lock is released.
func TestLock(t *testing.T) {
	dir, keys := t.TempDir(), newKeys(t)
	j := open(t, dir, keys)
	commitN(t, j, 1, 2)
	if _, err := Open(dir, keys, Options{}); err == nil {
		t.Fatal("a second Open of a journal in use succeeded")
	}
	j.Append(0, data(3)) // never written: lost in the crash
	j.Crash()
	j = open(t, dir, keys)
	defer j.Close()
	_, _, recs := recovered(j)
	wantRecords(t, recs, 1, 2)
}
