package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/setup"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/internal/testsupport/redistest"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/observe"
	_ "github.com/oblivkv/oblivkv/protocol/all"
	"github.com/oblivkv/oblivkv/seal"
)

// A small store: every protocol builds it in well under a second.
const (
	testCapacity  = 64
	testValueSize = 64
)

// store is one store under test: a data directory and a backend spec.
type store struct {
	dir, spec string
}

func (s store) options(protocol string) setup.Options {
	return setup.Options{DataDir: s.dir, Backend: s.spec, Protocol: protocol, Capacity: testCapacity, ValueSize: testValueSize}
}

// write opens the store (creating it as protocol), puts n keys with
// values tagged tag, and closes it; it returns what it wrote.
func (s store) write(t *testing.T, protocol string, n int, tag string) map[string]string {
	t.Helper()
	ctx := context.Background()
	o, err := setup.Open(ctx, s.options(protocol))
	if err != nil {
		t.Fatalf("opening %s: %v", protocol, err)
	}
	want := map[string]string{}
	for i := range n {
		k, v := fmt.Sprintf("key-%03d", i), fmt.Sprintf("%s-%d", tag, i)
		if err := o.Store.Put(ctx, k, []byte(v)); err != nil {
			t.Fatalf("%s: put %s: %v", protocol, k, err)
		}
		want[k] = v
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	return want
}

// check opens the store and requires every key of want to read back with
// its value.
func (s store) check(t *testing.T, want map[string]string) {
	t.Helper()
	ctx := context.Background()
	o, err := setup.Open(ctx, setup.Options{DataDir: s.dir, Backend: s.spec})
	if err != nil {
		t.Fatalf("opening the restored store: %v", err)
	}
	defer o.Close()
	for k, v := range want {
		got, ok, err := o.Store.Get(ctx, k)
		if err != nil || !ok || string(got) != v {
			t.Fatalf("get %s = %q, %v, %v; want %q", k, got, ok, err, v)
		}
	}
}

// loseAll deletes the store's storage and its data directory but its
// key file.
func (s store) loseAll(t *testing.T) {
	t.Helper()
	if setup.IsRedis(s.spec) {
		b, err := setup.OpenBackend(context.Background(), s.spec, s.dir, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := clearStorage(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
	for _, name := range []string{"store", "journal", "restored"} {
		if err := os.RemoveAll(filepath.Join(s.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

func newDiskStore(t *testing.T) store {
	return store{dir: filepath.Join(t.TempDir(), "data"), spec: "disk"}
}

func backupTo(t *testing.T, s store) (string, Contents) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "store.bak")
	c, err := Stopped(context.Background(), setup.Options{DataDir: s.dir, Backend: s.spec}, path)
	if err != nil {
		t.Fatalf("backup: %v", err)
	}
	return path, c
}

func restore(s store, path string, force bool) (Restored, error) {
	return Restore(context.Background(), path, RestoreOptions{DataDir: s.dir, Backend: s.spec, Force: force})
}

// TestEveryProtocolSurvivesLosingEverything: for every protocol on disk,
// a store written, stopped and backed up, whose storage and data
// directory (but the key) are then lost, is restored and reads back
// every key; info shows the restore.
func TestEveryProtocolSurvivesLosingEverything(t *testing.T) {
	for _, protocol := range kv.Protocols() {
		t.Run(protocol, func(t *testing.T) {
			s := newDiskStore(t)
			want := s.write(t, protocol, 20, "v")
			path, c := backupTo(t, s)
			s.loseAll(t)
			r, err := restore(s, path, false)
			if err != nil {
				t.Fatalf("restore: %v", err)
			}
			if r.Restore.At != c.Header.Anchor || r.Restore.Digest != c.DigestHex() {
				t.Fatalf("restore recorded %+v, archive at %d digest %s", r.Restore, c.Header.Anchor, c.DigestHex())
			}
			s.check(t, want)
			d, err := setup.Describe(context.Background(), setup.Options{DataDir: s.dir, Backend: s.spec})
			if err != nil || d.Restored == nil || d.Restored.At != c.Header.Anchor {
				t.Fatalf("info after the restore: %+v, %v; want restored at %d", d.Restored, err, c.Header.Anchor)
			}
		})
	}
}

// TestRedisSurvivesLosingEverything: the same on Redis, for every
// protocol, each in a database of its own; the Redis database is flushed.
func TestRedisSurvivesLosingEverything(t *testing.T) {
	url := strings.TrimSuffix(redistest.Start(t), "/0")
	for i, protocol := range kv.Protocols() {
		t.Run(protocol, func(t *testing.T) {
			s := store{dir: filepath.Join(t.TempDir(), "data"), spec: fmt.Sprintf("%s/%d", url, i+1)}
			want := s.write(t, protocol, 20, "v")
			path, c := backupTo(t, s)
			if c.Header.Backend != "redis" {
				t.Fatalf("header names backend %q, want redis", c.Header.Backend)
			}
			s.loseAll(t)
			if _, err := restore(s, path, false); err != nil {
				t.Fatalf("restore: %v", err)
			}
			s.check(t, want)
		})
	}
}

// TestCopyIsExact: storage and journal files after a restore's copy (and
// before the store is opened) are byte for byte those backed up: fences,
// versioned values and all, for the protocols that write them.
func TestCopyIsExact(t *testing.T) {
	for _, protocol := range []string{"treebeard", "taostore", "oblivistore"} {
		t.Run(protocol, func(t *testing.T) {
			s := newDiskStore(t)
			s.write(t, protocol, 10, "v")
			before, files := snapshot(t, s)
			path, _ := backupTo(t, s)
			s.loseAll(t)
			keys, err := setup.LoadKeys(s.dir)
			if err != nil {
				t.Fatal(err)
			}
			c, err := ReadFile(path, keys, Visitor{})
			if err != nil {
				t.Fatal(err)
			}
			if err := put(context.Background(), path, keys, c, kv.Restore{At: c.Header.Anchor}, RestoreOptions{DataDir: s.dir, Backend: s.spec}, false); err != nil {
				t.Fatal(err)
			}
			after, filesAfter := snapshot(t, s)
			delete(before, kv.MetaAddr) // the restore's record changes it
			delete(after, kv.MetaAddr)
			if !maps.Equal(before, after) {
				t.Fatalf("storage differs after the copy: %d addresses before, %d after", len(before), len(after))
			}
			if !maps.Equal(files, filesAfter) {
				t.Fatalf("journal files differ after the copy: %v / %v", slices.Sorted(maps.Keys(files)), slices.Sorted(maps.Keys(filesAfter)))
			}
			if !slices.ContainsFunc(slices.Collect(maps.Keys(before)), func(a string) bool { return strings.HasPrefix(a, backend.FenceKeyPrefix) }) && protocol != "taostore" {
				t.Fatalf("%s's storage holds no fence: the test copies none", protocol)
			}
		})
	}
}

// snapshot returns every storage address with its bytes, and every
// journal file but the locks and the free files with its bytes.
func snapshot(t *testing.T, s store) (storage, files map[string]string) {
	t.Helper()
	b, err := setup.OpenBackendReadOnly(context.Background(), s.spec, s.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	storage, files = map[string]string{}, map[string]string{}
	if err := backend.ReadAll(context.Background(), b, "", 0, func(items []backend.Item) error {
		for _, it := range items {
			storage[it.Addr] = string(it.Value)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	jdir := setup.JournalDir(s.dir)
	err = filepath.WalkDir(jdir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "LOCK" || journal.FreeFile(d.Name()) {
			return err
		}
		data, err := os.ReadFile(path)
		files[strings.TrimPrefix(path, jdir)] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return storage, files
}

// TestArchiveLeavesOutFreeFiles: a journal's free files (dropped
// segments' files waiting for reuse, garbage) go into neither an archive
// nor a server's snapshot, and a store whose segments were written over
// recycled files, their stale tails with them, restores and reads back.
func TestArchiveLeavesOutFreeFiles(t *testing.T) {
	s := newDiskStore(t)
	want := s.write(t, "pathoram", 20, "v")
	maps.Copy(want, s.write(t, "pathoram", 10, "w"))
	jdir := setup.JournalDir(s.dir)
	if !slices.ContainsFunc(fileNames(t, jdir), journal.FreeFile) {
		t.Fatalf("the journal holds no free file (%v): the test shows nothing", fileNames(t, jdir))
	}
	path, _ := backupTo(t, s)
	var archived []string
	_, err := ReadFile(path, nil, Visitor{File: func(name string, _ int64, r io.Reader) error {
		archived = append(archived, name)
		_, err := io.Copy(io.Discard, r)
		return err
	}})
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(archived, journal.FreeFile) || !slices.Contains(archived, "ident") {
		t.Fatalf("the archive holds %v: want the journal's files but its free files", archived)
	}
	snap, err := TakeSnapshot(context.Background(), setup.Options{DataDir: s.dir, Backend: s.spec})
	if err != nil {
		t.Fatal(err)
	}
	if names := fileNames(t, snap.journalDir()); slices.ContainsFunc(names, journal.FreeFile) || !slices.Contains(names, "ident") {
		t.Fatalf("the snapshot's journal holds %v: want the journal's files but its free files", names)
	}
	if err := snap.Remove(); err != nil {
		t.Fatal(err)
	}
	s.loseAll(t)
	if _, err := restore(s, path, false); err != nil {
		t.Fatalf("restore: %v", err)
	}
	s.check(t, want)
}

// fileNames returns the names of the files in dir.
func fileNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names
}

// TestTamperedArchiveRefused: a bit flipped anywhere in an archive, or an
// archive cut short anywhere, is refused by verify (without a key, but
// for the MAC, which only a key checks) and by restore, which writes
// nothing; so is an archive under another store's key.
func TestTamperedArchiveRefused(t *testing.T) {
	s := newDiskStore(t)
	s.write(t, "pathoram", 5, "v")
	path, _ := backupTo(t, s)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := setup.LoadKeys(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	macStart := len(good) - digestLen
	for _, at := range probePositions(len(good)) {
		bad := slices.Clone(good)
		bad[at] ^= 1 << (at % 8)
		_, errNoKey := Read(strings.NewReader(string(bad)), nil, Visitor{})
		_, errKey := Read(strings.NewReader(string(bad)), keys, Visitor{})
		if errKey == nil || (errNoKey == nil) != (at >= macStart) {
			t.Fatalf("bit flipped at byte %d of %d: verify without key: %v, with key: %v", at, len(good), errNoKey, errKey)
		}
	}
	for _, n := range append(probePositions(len(good)), len(good)-1) {
		if _, err := Read(strings.NewReader(string(good[:n])), nil, Visitor{}); !errors.Is(err, ErrDamaged) {
			t.Fatalf("archive cut to %d of %d bytes: verify: %v, want ErrDamaged", n, len(good), err)
		}
	}

	s.loseAll(t)
	restoreRefused := func(name string, archive []byte, want error) {
		t.Helper()
		bad := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(bad, archive, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := restore(s, bad, false); !errors.Is(err, want) {
			t.Fatalf("restore of %s: %v, want %v", name, err, want)
		}
		if entries, _ := os.ReadDir(s.dir); len(entries) != 1 {
			t.Fatalf("restore of %s wrote to the data dir: %v", name, entries)
		}
	}
	flipped := slices.Clone(good)
	flipped[len(good)/2] ^= 4
	restoreRefused("flipped", flipped, ErrDamaged)
	restoreRefused("truncated", good[:len(good)-10], ErrDamaged)
	restoreRefused("mac-flipped", append(slices.Clone(good[:len(good)-1]), good[len(good)-1]^1), ErrWrongKey)

	other, err := seal.GenerateMaster()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(seal.KeyEnv, fmt.Sprintf("%x", other))
	restoreRefused("other-key", good, ErrWrongKey)
}

// probePositions returns byte positions spread over an archive of size n:
// its first and last hundred bytes, and a hundred between.
func probePositions(n int) []int {
	var at []int
	for i := range min(100, n) {
		at = append(at, i, n-1-i)
	}
	for i := range 100 {
		at = append(at, i*n/100)
	}
	slices.Sort(at)
	return slices.Compact(at)
}

// TestRestoreRefusals: restore refuses a data dir holding a journal,
// storage holding a newer copy of the store (naming both positions),
// another store, or other data; --force overrides each.
func TestRestoreRefusals(t *testing.T) {
	s := newDiskStore(t)
	s.write(t, "treebeard", 5, "old")
	path, c := backupTo(t, s)
	want := s.write(t, "treebeard", 5, "new") // storage moves past the archive

	_, err := restore(s, path, false)
	if err == nil || !strings.Contains(err.Error(), "already holds a journal") {
		t.Fatalf("restore over a data dir with a journal: %v", err)
	}
	if err := os.RemoveAll(setup.JournalDir(s.dir)); err != nil {
		t.Fatal(err)
	}
	_, err = restore(s, path, false)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("newer than the archive's %d", c.Header.Anchor)) {
		t.Fatalf("restore over newer storage: %v", err)
	}
	if _, err := restore(s, path, true); err != nil {
		t.Fatalf("forced restore: %v", err)
	}
	old := map[string]string{}
	for k := range want {
		old[k] = strings.Replace(want[k], "new", "old", 1)
	}
	s.check(t, old)

	// Another store's storage, under another key.
	t.Run("another store", func(t *testing.T) {
		o := newDiskStore(t)
		o.write(t, "treebeard", 1, "x")
		if err := os.Remove(setup.KeyFile(o.dir)); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(setup.JournalDir(o.dir)); err != nil {
			t.Fatal(err)
		}
		copyKey(t, s.dir, o.dir)
		if _, err := restore(o, path, false); err == nil || !strings.Contains(err.Error(), "another store") {
			t.Fatalf("restore over another store: %v", err)
		}
		if _, err := restore(o, path, true); err != nil {
			t.Fatalf("forced restore over another store: %v", err)
		}
		o.check(t, old)
	})

	t.Run("garbage", func(t *testing.T) {
		g := newDiskStore(t)
		b, err := setup.OpenBackend(context.Background(), g.spec, g.dir, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Write(context.Background(), []backend.Item{{Addr: "junk", Value: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
		b.Close()
		copyKey(t, s.dir, g.dir)
		if _, err := restore(g, path, false); err == nil || !strings.Contains(err.Error(), "1 addresses and no store") {
			t.Fatalf("restore over garbage: %v", err)
		}
		if _, err := restore(g, path, true); err != nil {
			t.Fatalf("forced restore over garbage: %v", err)
		}
		st, _ := snapshot(t, g)
		if _, ok := st["junk"]; ok {
			t.Fatal("a forced restore left the garbage in storage")
		}
	})
}

func copyKey(t *testing.T, from, to string) {
	t.Helper()
	key, err := os.ReadFile(setup.KeyFile(from))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(to, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(setup.KeyFile(to), key, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestStorageFromBeforeARestoreRefused: after a restore, storage from
// before the loss is refused at start as rolled back, naming both
// positions: at once (its anchor lies beyond the restored journal), and
// once the restored store has crashed with its journal past that anchor,
// its checkpoint still before it (where the positions alone would let
// it pass: it records no restore). A plain copy of older storage is
// refused as before.
func TestStorageFromBeforeARestoreRefused(t *testing.T) {
	ctx := context.Background()
	s := newDiskStore(t)
	s.write(t, "pathoram", 5, "a")
	path, c := backupTo(t, s)
	s.write(t, "pathoram", 10, "b")
	preLoss := copyStorage(t, s)
	s.loseAll(t)
	if _, err := restore(s, path, false); err != nil {
		t.Fatal(err)
	}
	afterRestore := copyStorage(t, s)

	putStorage(t, s, preLoss)
	_, err := setup.Open(ctx, setup.Options{DataDir: s.dir, Backend: s.spec})
	if !errors.Is(err, kv.ErrRollback) || !strings.Contains(err.Error(), fmt.Sprintf("position %d", c.Header.Anchor)) {
		t.Fatalf("pre-loss storage after a restore: %v, want a rollback naming position %d", err, c.Header.Anchor)
	}

	putStorage(t, s, afterRestore)
	checkpoint, last := crashAfterWrites(t, s, 40)
	preLossAnchor := anchorOf(t, s, preLoss)
	if checkpoint > preLossAnchor || preLossAnchor > last {
		t.Fatalf("the pre-loss anchor %d lies outside the restored journal's checkpoint %d and last record %d: the test shows nothing", preLossAnchor, checkpoint, last)
	}
	crashed := copyStorage(t, s)
	putStorage(t, s, preLoss)
	_, err = setup.Open(ctx, setup.Options{DataDir: s.dir, Backend: s.spec})
	if !errors.Is(err, kv.ErrRollback) || !strings.Contains(err.Error(), fmt.Sprintf("storage (at journal position %d) is from before that restore", preLossAnchor)) {
		t.Fatalf("pre-loss storage once the restored journal moved past it: %v, want a rollback", err)
	}

	putStorage(t, s, crashed)
	s.check(t, map[string]string{"crash-0": "c", "key-000": "a-0"}) // recovers, and checkpoints
	putStorage(t, s, afterRestore)
	_, err = setup.Open(ctx, setup.Options{DataDir: s.dir, Backend: s.spec})
	if !errors.Is(err, kv.ErrRollback) || !strings.Contains(err.Error(), "storage is at journal position") {
		t.Fatalf("a plain copy of older storage: %v, want a rollback", err)
	}
}

// crashAfterWrites opens a pathoram store, puts n keys and crashes it
// (its journal closed as a crash would, nothing checkpointed), and
// returns the anchor it started from and its journal's last position.
func crashAfterWrites(t *testing.T, s store, n int) (anchor, last uint64) {
	t.Helper()
	ctx := context.Background()
	keys, err := setup.LoadKeys(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := setup.OpenBackend(ctx, s.spec, s.dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if anchor, _, err = durable.ReadAnchor(ctx, b, keys); err != nil {
		t.Fatal(err)
	}
	var j *journal.Journal
	st, err := kv.Open(ctx, kv.Config{Protocol: "pathoram", Backend: b, Keys: keys, Capacity: testCapacity, ValueSize: testValueSize,
		OpenJournal: func(keys *seal.Keys) (durable.Journal, error) {
			j, err = journal.Open(setup.JournalDir(s.dir), keys, journal.Options{})
			return j, err
		}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := st.Put(ctx, fmt.Sprint("crash-", i), []byte("c")); err != nil {
			t.Fatal(err)
		}
	}
	last = j.Last()
	j.Crash()
	return anchor, last
}

// anchorOf returns the anchor of a copy of a disk store's storage.
func anchorOf(t *testing.T, s store, copied string) uint64 {
	t.Helper()
	keys, err := setup.LoadKeys(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := setup.OpenDiskStore(copied, true)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	at, _, err := durable.ReadAnchor(context.Background(), b, keys)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// copyStorage returns a copy of a disk store's DIR/store.
func copyStorage(t *testing.T, s store) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "store")
	if err := os.CopyFS(dst, os.DirFS(filepath.Join(s.dir, "store"))); err != nil {
		t.Fatal(err)
	}
	return dst
}

// putStorage replaces a disk store's DIR/store with a copy.
func putStorage(t *testing.T, s store, copied string) {
	t.Helper()
	dst := filepath.Join(s.dir, "store")
	if err := os.RemoveAll(dst); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(dst, os.DirFS(copied)); err != nil {
		t.Fatal(err)
	}
}

// TestBackupShowsStorageOnlyItsSize: backups of two stores of one
// capacity, one holding one key and one holding many, show storage the
// same calls: the same kinds, addresses and sizes, every address read
// once, in ascending order, after one scan.
func TestBackupShowsStorageOnlyItsSize(t *testing.T) {
	few, many := tapBackup(t, 1), tapBackup(t, testCapacity-4)
	if len(few) != len(many) {
		t.Fatalf("%d calls backing up one key, %d backing up many", len(few), len(many))
	}
	for i := range few {
		if few[i].Op != many[i].Op || !slices.Equal(few[i].Addrs, many[i].Addrs) || !slices.Equal(few[i].Sizes, many[i].Sizes) {
			t.Fatalf("call %d differs: %v %d addrs vs %v %d addrs", i, few[i].Op, len(few[i].Addrs), many[i].Op, len(many[i].Addrs))
		}
	}
	var read []string
	scans := 0
	for _, r := range few {
		switch r.Op {
		case observe.OpScan:
			scans++
		case observe.OpRead:
			read = append(read, r.Addrs...)
		default:
			t.Fatalf("a backup made a %v call", r.Op)
		}
	}
	copied := read[2:] // the metadata record and the anchor come first
	if scans != 1 || !slices.IsSorted(copied) || len(slices.Compact(slices.Clone(copied))) != len(copied) {
		t.Fatalf("%d scans; %d addresses read, sorted %v", scans, len(copied), slices.IsSorted(copied))
	}
	t.Logf("a backup of a treebeard store of capacity %d: %d calls, %d addresses copied", testCapacity, len(few), len(copied))
}

// tapBackup backs up a treebeard store holding n keys through a Tap and
// returns what storage saw.
func tapBackup(t *testing.T, n int) []observe.Record {
	t.Helper()
	s := newDiskStore(t)
	s.write(t, "treebeard", n, "v")
	keys, err := setup.LoadKeys(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := setup.OpenBackendReadOnly(context.Background(), s.spec, s.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	log := &observe.MemoryLog{}
	src := Source{JournalDir: setup.JournalDir(s.dir), Storage: observe.NewTap(b, log), Keys: keys, Kind: "disk"}
	if _, err := Write(context.Background(), io.Discard, src); err != nil {
		t.Fatal(err)
	}
	return log.Records()
}

// TestBackupOfAServedStoreRefusedDirectly: a store whose journal a
// process holds is not copied behind its back.
func TestBackupOfAServedStoreRefusedDirectly(t *testing.T) {
	s := newDiskStore(t)
	s.write(t, "treebeard", 1, "v")
	o, err := setup.Open(context.Background(), setup.Options{DataDir: s.dir, Backend: s.spec})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if _, err := Stopped(context.Background(), setup.Options{DataDir: s.dir, Backend: s.spec}, filepath.Join(t.TempDir(), "b")); !errors.Is(err, ErrInUse) {
		t.Fatalf("backup of an open store: %v, want ErrInUse", err)
	}
}

// TestUnfinishedRestore: a restore cut short after it began writing
// leaves the data dir marked: a start refuses it, and restore runs again
// without --force.
func TestUnfinishedRestore(t *testing.T) {
	s := newDiskStore(t)
	want := s.write(t, "treebeard", 5, "v")
	path, _ := backupTo(t, s)
	s.loseAll(t)
	// A restore that wrote its mark and part of the journal, then died.
	if err := os.WriteFile(setup.RestoringFile(s.dir), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(setup.JournalDir(s.dir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(setup.JournalDir(s.dir), "ident"), []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Open(context.Background(), setup.Options{DataDir: s.dir, Backend: s.spec}); err == nil || !strings.Contains(err.Error(), "has not finished") {
		t.Fatalf("start on an unfinished restore: %v", err)
	}
	if _, err := restore(s, path, false); err != nil {
		t.Fatalf("restore again: %v", err)
	}
	s.check(t, want)
}

// TestRestoreRefusesUnknownProtocol: an archive (whole, under the right
// key) of a protocol this build does not know is refused before anything
// is written.
func TestRestoreRefusesUnknownProtocol(t *testing.T) {
	s := newDiskStore(t)
	s.write(t, "plain", 1, "v")
	keys, err := setup.LoadKeys(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "unknown.bak")
	if _, err := WriteFile(path, func(w io.Writer) (Contents, error) {
		aw, err := NewWriter(w, Header{Protocol: "no-such-protocol"}, keys)
		if err != nil {
			return Contents{}, err
		}
		sum, digest, err := aw.Close()
		return Contents{Summary: sum, Digest: digest}, err
	}); err != nil {
		t.Fatal(err)
	}
	s.loseAll(t)
	if _, err := restore(s, path, false); !errors.Is(err, kv.ErrUnknownProtocol) {
		t.Fatalf("restore of an unknown protocol's archive: %v", err)
	}
	if entries, _ := os.ReadDir(s.dir); len(entries) != 1 {
		t.Fatalf("the refused restore wrote to the data dir: %v", entries)
	}
}
