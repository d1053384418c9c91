package observe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
)

var ctx = context.Background()

// run issues a fixed sequence of calls: write, read (one address missing),
// delete, scan, and a read that fails because the backend is closed.
func run(t *testing.T, tap *Tap) {
	t.Helper()
	if err := tap.Write(ctx, []backend.Item{{Addr: "a", Value: []byte("12345")}, {Addr: "b", Value: []byte("1234567")}}); err != nil {
		t.Fatal(err)
	}
	vals, err := tap.Read(ctx, []string{"a", "missing", "b"})
	if err != nil || string(vals[0]) != "12345" || vals[1] != nil || string(vals[2]) != "1234567" {
		t.Fatalf("Read through the tap = %q, %v", vals, err)
	}
	if err := tap.Delete(ctx, []string{"a", "missing"}); err != nil {
		t.Fatal(err)
	}
	var scanned []string
	if err := tap.Scan(ctx, "b", func(a string) error { scanned = append(scanned, a); return nil }); err != nil || len(scanned) != 1 {
		t.Fatalf("Scan through the tap = %q, %v", scanned, err)
	}
	if err := tap.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := tap.Read(ctx, []string{"b"}); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("Read after Close: %v; want backend.ErrClosed", err)
	}
}

func TestCounters(t *testing.T) {
	for _, sink := range []Sink{nil, &MemoryLog{}} {
		tap := NewTap(mem.New(), sink)
		run(t, tap)
		want := Counters{Calls: 5, Reads: 2, Writes: 1, Deletes: 1,
			AddrsRead: 4, AddrsWritten: 2, AddrsDeleted: 2,
			BytesRead: 12, BytesWritten: 12, Errors: 1}
		got := tap.Counters()
		if got != want {
			t.Errorf("sink %T: counters\n got %+v\nwant %+v", sink, got, want)
		}
		if got.Bytes() != 24 {
			t.Errorf("Bytes() = %d; want 24", got.Bytes())
		}
		if d := got.Sub(Counters{Calls: 1, Reads: 1, BytesRead: 5, Errors: 1}); d.Calls != 4 || d.Reads != 1 || d.BytesRead != 7 || d.Errors != 0 || d.Writes != 1 {
			t.Errorf("Sub = %+v", d)
		}
	}
}

func TestLogRecords(t *testing.T) {
	log := &MemoryLog{}
	tap := NewTap(mem.New(), log)
	run(t, tap)
	recs := log.Records()
	want := []struct {
		op    Op
		addrs []string
		sizes []int
		err   bool
	}{
		{OpWrite, []string{"a", "b"}, []int{5, 7}, false},
		{OpRead, []string{"a", "missing", "b"}, []int{5, 0, 7}, false},
		{OpDelete, []string{"a", "missing"}, []int{0, 0}, false},
		{OpScan, []string{"b"}, []int{0}, false},
		{OpRead, []string{"b"}, []int{0}, true},
	}
	if len(recs) != len(want) {
		t.Fatalf("%d records; want %d: %+v", len(recs), len(want), recs)
	}
	var last time.Duration
	for i, r := range recs {
		w := want[i]
		if r.Seq != uint64(i+1) || r.Op != w.op || !reflect.DeepEqual(r.Addrs, w.addrs) ||
			!reflect.DeepEqual(r.Sizes, w.sizes) || r.Err != w.err {
			t.Errorf("record %d = %+v; want seq %d %v %q %v err %v", i, r, i+1, w.op, w.addrs, w.sizes, w.err)
		}
		if r.Start < last || r.Took < 0 {
			t.Errorf("record %d: start %v (previous %v), took %v", i, r.Start, last, r.Took)
		}
		last = r.Start
	}
	log.Reset()
	if n := len(log.Records()); n != 0 {
		t.Errorf("%d records after Reset", n)
	}
}

// Records reach the sink in sequence order, one per call, from many
// goroutines.
func TestLogSeqConcurrent(t *testing.T) {
	log := &MemoryLog{}
	tap := NewTap(mem.New(), log)
	const goroutines, calls = 8, 50
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range calls {
				addr := fmt.Sprintf("g%d/%d", g, i)
				if err := tap.Write(ctx, []backend.Item{{Addr: addr, Value: []byte(addr)}}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	recs := log.Records()
	if len(recs) != goroutines*calls {
		t.Fatalf("%d records; want %d", len(recs), goroutines*calls)
	}
	seen := map[string]bool{}
	for i, r := range recs {
		if r.Seq != uint64(i+1) {
			t.Fatalf("record %d has seq %d", i, r.Seq)
		}
		seen[r.Addrs[0]] = true
	}
	if len(seen) != goroutines*calls {
		t.Errorf("%d distinct addresses logged; want %d", len(seen), goroutines*calls)
	}
	if c := tap.Counters(); c.Calls != goroutines*calls {
		t.Errorf("Calls = %d; want %d", c.Calls, goroutines*calls)
	}
}

// tee sends every record to several sinks.
type tee []Sink

func (ts tee) Record(r Record) error {
	var errs []error
	for _, s := range ts {
		errs = append(errs, s.Record(r))
	}
	return errors.Join(errs...)
}

// normalise makes empty slices nil: the file format cannot tell them apart.
func normalise(recs []Record) []Record {
	out := append([]Record(nil), recs...)
	for i := range out {
		if len(out[i].Addrs) == 0 {
			out[i].Addrs = nil
		}
		if len(out[i].Sizes) == 0 {
			out[i].Sizes = nil
		}
	}
	return out
}

func writeLog(t *testing.T, path string, recs []Record) {
	t.Helper()
	f, err := CreateFileLog(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := f.Record(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestFileLogRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tap.log")
	fl, err := CreateFileLog(path)
	if err != nil {
		t.Fatal(err)
	}
	ml := &MemoryLog{}
	tap := NewTap(mem.New(), tee{ml, fl})
	run(t, tap)
	big := bytes.Repeat([]byte{0xEE}, 70000)
	tap2 := NewTap(mem.New(), tee{ml, fl}) // a second tap continues the log
	if err := tap2.Write(ctx, []backend.Item{{Addr: "\x00bin\xff", Value: big}, {Addr: "", Value: nil}}); err != nil {
		t.Fatal(err)
	}
	if err := tap2.Write(ctx, nil); err != nil { // an empty batch
		t.Fatal(err)
	}
	fence := backend.Fence{Key: "fence/\x00", Token: 1<<64 - 1}
	if err := tap2.WriteFenced(ctx, fence, []backend.Item{{Addr: "f", Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	if err := tap2.SinkErr(); err != nil {
		t.Fatal(err)
	}
	if err := fl.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := normalise(ml.Records())
	if len(want) != 8 || want[7].Fence != fence.Key || want[7].Token != fence.Token {
		t.Fatalf("memory log holds %+v; want 8 records, the last fenced by %+v", want, fence)
	}
	if !reflect.DeepEqual(normalise(got), want) {
		t.Errorf("file log round trip differs:\n got %+v\nwant %+v", got, want)
	}

	// Extreme field values survive too.
	path2 := filepath.Join(t.TempDir(), "extreme.log")
	extreme := []Record{{Seq: 1<<64 - 1, Start: 1<<63 - 1, Took: 1 << 40, Op: OpScan, Err: true,
		Addrs: []string{string(bytes.Repeat([]byte{0}, 300))}, Sizes: []int{1 << 40}}}
	writeLog(t, path2, extreme)
	if got, err := ReadFile(path2); err != nil || !reflect.DeepEqual(got, extreme) {
		t.Errorf("extreme record round trip = %+v, %v", got, err)
	}
}

func TestTruncatedLog(t *testing.T) {
	dir := t.TempDir()
	recs := []Record{
		{Seq: 1, Start: 10, Took: 300, Op: OpRead, Addrs: []string{"abc", "de"}, Sizes: []int{100, 0}},
		{Seq: 2, Start: 1 << 35, Took: 7, Op: OpWrite, Addrs: []string{"x"}, Sizes: []int{1 << 20}},
		{Seq: 3, Start: 1 << 36, Took: 1, Op: OpDelete, Err: true, Addrs: []string{"yy"}, Sizes: []int{0}},
	}
	// Record boundaries, from the size of each record's frame alone.
	boundaries := map[int]int{logHeaderSize: 0}
	end := logHeaderSize
	for i, r := range recs {
		p := filepath.Join(dir, fmt.Sprint("one", i))
		writeLog(t, p, []Record{r})
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		end += int(info.Size()) - logHeaderSize
		boundaries[end] = i + 1
	}
	full := filepath.Join(dir, "full")
	writeLog(t, full, recs)
	data, err := os.ReadFile(full)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != end {
		t.Fatalf("log is %d bytes; the frames add up to %d", len(data), end)
	}
	cut := filepath.Join(dir, "cut")
	for n := range len(data) + 1 {
		if err := os.WriteFile(cut, data[:n], 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := ReadFile(cut) // must not panic
		k, atBoundary := boundaries[n]
		switch {
		case atBoundary && err != nil:
			t.Errorf("log cut after record %d (%d bytes): %v; want no error", k, n, err)
		case atBoundary && len(got)+k > 0 && !reflect.DeepEqual(got, recs[:k]):
			t.Errorf("log cut after record %d: records %+v; want %+v", k, got, recs[:k])
		case !atBoundary && err == nil:
			t.Errorf("log cut inside a record or the header (%d of %d bytes): no error, %d records", n, len(data), len(got))
		}
	}
}

// A log of version 1, written before fenced writes, reads as it did.
func TestReadsVersion1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v1")
	recs := []Record{{Seq: 1, Op: OpWrite, Addrs: []string{"a"}, Sizes: []int{3}, Err: true}, {Seq: 2, Op: OpRead, Addrs: []string{"a"}, Sizes: []int{3}}}
	writeLog(t, path, recs)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append([]byte(logMagicV1), data[logHeaderSize:]...), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadFile(path); err != nil || !reflect.DeepEqual(got, recs) {
		t.Fatalf("version 1 log read as %+v, %v; want %+v", got, err, recs)
	}
}

func TestBadHeader(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	writeLog(t, good, []Record{{Seq: 1, Op: OpRead}})
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	for _, head := range []string{"OKVTAP4\n", "okvtap3\n", "OKVTAP3\r", "\x00\x00\x00\x00\x00\x00\x00\x00"} {
		p := filepath.Join(dir, "bad")
		if err := os.WriteFile(p, append([]byte(head), data[len(logMagic):]...), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadFile(p); err == nil {
			t.Errorf("a log with header %q was accepted", head)
		}
	}
	if _, err := NewReader(bytes.NewReader(nil)); err == nil {
		t.Error("an empty log was accepted")
	}
	if _, err := ReadFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing log file was accepted")
	}
}

// A corrupt frame claiming a huge address is refused without allocating it.
func TestCorruptAddressLength(t *testing.T) {
	frame := append([]byte(logMagic), make([]byte, 8)...) // origin 0
	frame = append(frame, 1, 0, 0, byte(OpRead), 0, 1)    // seq 1, start 0, took 0, read, no error, 1 address
	frame = append(frame, 0x80, 0x80, 0x80, 0x80, 0x08)   // address length 2^31
	rd, err := NewReader(bytes.NewReader(frame))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rd.Next(); err == nil {
		t.Fatal("a record with a 2 GiB address was accepted")
	}
}

// The log keeps its own copy of the addresses: callers may reuse their
// slices as soon as a call returns.
func TestTapCopiesAddresses(t *testing.T) {
	log := &MemoryLog{}
	tap := NewTap(mem.New(), log)
	addrs := []string{"a", "b"}
	if _, err := tap.Read(ctx, addrs); err != nil {
		t.Fatal(err)
	}
	addrs[0] = "reused"
	if err := tap.Delete(ctx, addrs); err != nil {
		t.Fatal(err)
	}
	addrs[1] = "reused too"
	items := []backend.Item{{Addr: "w", Value: []byte("v")}}
	if err := tap.Write(ctx, items); err != nil {
		t.Fatal(err)
	}
	items[0].Addr = "reused"
	recs := log.Records()
	want := [][]string{{"a", "b"}, {"reused", "b"}, {"w"}}
	if len(recs) != len(want) {
		t.Fatalf("%d records; want %d", len(recs), len(want))
	}
	for i, r := range recs {
		if !reflect.DeepEqual(r.Addrs, want[i]) {
			t.Errorf("record %d addresses = %q; want %q", i, r.Addrs, want[i])
		}
	}
}

// A versioned write is a write to the storage operator: counted and
// logged as one, with the stored sizes (version included).
func TestWriteVersioned(t *testing.T) {
	log := &MemoryLog{}
	tap := NewTap(mem.New(), log)
	items := []backend.VersionedItem{{Addr: "a", Version: 2, Value: []byte("12345")}, {Addr: "b", Version: 1, Value: nil}}
	if stale, err := tap.WriteVersioned(ctx, items); err != nil || stale != 0 {
		t.Fatalf("WriteVersioned = %d stale, %v", stale, err)
	}
	items[0].Version = 1 // older than the stored version 2
	if stale, err := tap.WriteVersioned(ctx, items[:1]); err != nil || stale != 1 {
		t.Fatalf("stale WriteVersioned = %d stale, %v; want 1 stale", stale, err)
	}
	want := Counters{Calls: 2, Writes: 2, AddrsWritten: 3, BytesWritten: 3*backend.VersionSize + 10}
	if got := tap.Counters(); got != want {
		t.Errorf("counters\n got %+v\nwant %+v", got, want)
	}
	recs := log.Records()
	if len(recs) != 2 || recs[0].Op != OpWrite || !reflect.DeepEqual(recs[0].Addrs, []string{"a", "b"}) ||
		!reflect.DeepEqual(recs[0].Sizes, []int{backend.VersionSize + 5, backend.VersionSize}) {
		t.Fatalf("records %+v; want a write of a and b with their stored sizes", recs)
	}
}

// A fenced write is a write of its items to the storage operator, with
// the fence's key and token beside them (its token counted as a written
// address), whether storage takes it or refuses it.
func TestWriteFenced(t *testing.T) {
	log := &MemoryLog{}
	tap := NewTap(mem.New(), log)
	items := []backend.Item{{Addr: "a", Value: []byte("12345")}, {Addr: "b", Value: nil}}
	if err := tap.WriteFenced(ctx, backend.Fence{Key: "fence", Token: 7}, items); err != nil {
		t.Fatal(err)
	}
	if err := tap.WriteFenced(ctx, backend.Fence{Key: "fence", Token: 6}, items[:1]); !errors.Is(err, backend.ErrFenced) {
		t.Fatalf("WriteFenced with an older token = %v; want ErrFenced", err)
	}
	if err := tap.WriteFenced(ctx, backend.Fence{}, items[1:]); err != nil { // unfenced: a Write
		t.Fatal(err)
	}
	want := Counters{Calls: 3, Writes: 3, AddrsWritten: 3 + 2 + 1, BytesWritten: 5 + backend.TokenSize + 5 + backend.TokenSize, Errors: 1}
	if got := tap.Counters(); got != want {
		t.Errorf("counters\n got %+v\nwant %+v", got, want)
	}
	recs := log.Records()
	if len(recs) != 3 {
		t.Fatalf("%d records; want 3", len(recs))
	}
	for i, w := range []Record{
		{Op: OpWrite, Addrs: []string{"a", "b"}, Sizes: []int{5, 0}, Fence: "fence", Token: 7},
		{Op: OpWrite, Addrs: []string{"a"}, Sizes: []int{5}, Fence: "fence", Token: 6, Err: true},
		{Op: OpWrite, Addrs: []string{"b"}, Sizes: []int{0}},
	} {
		r := recs[i]
		if r.Op != w.Op || !reflect.DeepEqual(r.Addrs, w.Addrs) || !reflect.DeepEqual(r.Sizes, w.Sizes) ||
			r.Fence != w.Fence || r.Token != w.Token || r.Err != w.Err {
			t.Errorf("record %d = %+v; want %+v", i, r, w)
		}
	}
}

// A fenced Pipeline through the tap is logged as the fenced write and
// then each read, in one call or not; a refused one returns no values.
func TestPipelineFenced(t *testing.T) {
	for _, one := range []bool{false, true} {
		var next backend.Backend = mem.New()
		l := &lined{Backend: next}
		if one {
			next = l
		}
		log := &MemoryLog{}
		tap := NewTap(next, log)
		items, reads := []backend.Item{{Addr: "a", Value: []byte("xy")}}, [][]string{{"a"}, {"b"}}
		lists, err := backend.PipelineFenced(ctx, tap, backend.Fence{Key: "f", Token: 2}, items, reads)
		if err != nil || len(lists) != 2 || string(lists[0][0]) != "xy" || lists[1][0] != nil {
			t.Fatalf("one call %v: PipelineFenced = %q, %v", one, lists, err)
		}
		lists, err = backend.PipelineFenced(ctx, tap, backend.Fence{Key: "f", Token: 1}, items, reads)
		if !errors.Is(err, backend.ErrFenced) || lists != nil {
			t.Fatalf("one call %v: PipelineFenced with an older token = %q, %v; want ErrFenced and nothing", one, lists, err)
		}
		// In one call storage sees the refused write's reads too (and
		// they fail with it); in separate calls they are never issued.
		recs, want := log.Records(), 4
		if one {
			want = 6
		}
		if len(recs) != want {
			t.Fatalf("one call %v: logged %+v; want %d records", one, recs, want)
		}
		for i, r := range recs {
			refused := i >= 3
			if i%3 == 0 && (r.Op != OpWrite || r.Fence != "f" || r.Token != uint64(2-i/3) || r.Err != refused) ||
				i%3 != 0 && (r.Op != OpRead || !reflect.DeepEqual(r.Addrs, reads[i%3-1]) || r.Err != refused) {
				t.Fatalf("one call %v: record %d = %+v", one, i, r)
			}
		}
		if one && l.calls != 2 {
			t.Fatalf("the backend got %d PipelineFenced calls, want 2", l.calls)
		}
	}
}

type failingSink struct{ n int }

func (f *failingSink) Record(Record) error {
	f.n++
	return fmt.Errorf("sink failure %d", f.n)
}

// A failing sink never fails the backend call; the first error is kept.
func TestSinkErr(t *testing.T) {
	sink := &failingSink{}
	tap := NewTap(mem.New(), sink)
	for range 3 {
		if err := tap.Write(ctx, []backend.Item{{Addr: "a", Value: []byte("v")}}); err != nil {
			t.Fatalf("Write failed because the sink did: %v", err)
		}
	}
	if err := tap.SinkErr(); err == nil || err.Error() != "sink failure 1" {
		t.Errorf("SinkErr = %v; want the first failure", err)
	}
	if sink.n != 3 {
		t.Errorf("sink saw %d records; want 3", sink.n)
	}
}

func TestOpString(t *testing.T) {
	for op, s := range map[Op]string{OpRead: "read", OpWrite: "write", OpDelete: "delete", OpScan: "scan", 0: "unknown", 99: "unknown"} {
		if op.String() != s {
			t.Errorf("Op(%d).String() = %q; want %q", op, op.String(), s)
		}
	}
}

// lined is a backend that does a Write and several Reads in one call.
type lined struct {
	backend.Backend
	calls int
}

func (l *lined) Pipeline(ctx context.Context, items []backend.Item, reads [][]string) ([][][]byte, error) {
	l.calls++
	return backend.Pipeline(ctx, l.Backend, items, reads)
}

func (l *lined) PipelineFenced(ctx context.Context, f backend.Fence, items []backend.Item, reads [][]string) ([][][]byte, error) {
	l.calls++
	return backend.PipelineFenced(ctx, l.Backend, f, items, reads)
}

// A Pipeline through the tap, of one Read or of two, is logged as the
// write and then each read in order, whether the backend below does them
// in one call or not, and reaches a backend that can in one call.
func TestPipeline(t *testing.T) {
	for _, reads := range [][][]string{{{"a", "b"}}, {{"a"}, {"b", "a"}}} {
		for _, one := range []bool{false, true} {
			var next backend.Backend = mem.New()
			l := &lined{Backend: next}
			if one {
				next = l
			}
			log := &MemoryLog{}
			tap := NewTap(next, log)
			lists, err := backend.Pipeline(ctx, tap, []backend.Item{{Addr: "a", Value: []byte("xy")}}, reads)
			if err != nil || len(lists) != len(reads) {
				t.Fatalf("Pipeline through the tap = %q, %v", lists, err)
			}
			for i, addrs := range reads {
				for j, a := range addrs {
					if got := lists[i][j]; (a == "a") != (string(got) == "xy") || a == "b" && got != nil {
						t.Fatalf("Pipeline through the tap read %q as %q", a, got)
					}
				}
			}
			recs := log.Records()
			if len(recs) != 1+len(reads) || recs[0].Op != OpWrite {
				t.Fatalf("one call %v: logged %+v; want the write, then the reads", one, recs)
			}
			for i, addrs := range reads {
				if recs[1+i].Op != OpRead || !reflect.DeepEqual(recs[1+i].Addrs, addrs) {
					t.Fatalf("one call %v: logged %+v; want the reads in order", one, recs)
				}
			}
			if c := tap.Counters(); c.Writes != 1 || c.Reads != uint64(len(reads)) {
				t.Fatalf("counters %+v; want one write and %d reads", c, len(reads))
			}
			if one && l.calls != 1 {
				t.Fatalf("the backend got %d Pipeline calls, want 1", l.calls)
			}
		}
	}
}

// A log of version 2, with fenced writes and no origin, reads as it did.
func TestReadsVersion2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v2")
	recs := []Record{{Seq: 1, Op: OpWrite, Addrs: []string{"a"}, Sizes: []int{3}, Fence: "fence/t", Token: 9}}
	writeLog(t, path, recs)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append([]byte(logMagicV2), data[logHeaderSize:]...), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadFile(path); err != nil || !reflect.DeepEqual(got, recs) {
		t.Fatalf("version 2 log read as %+v, %v; want %+v", got, err, recs)
	}
	if _, err := Merge(filepath.Join(t.TempDir(), "out"), path); err == nil || !strings.Contains(err.Error(), "no origin") {
		t.Fatalf("Merge of a version 2 log = %v, want a refusal", err)
	}
}

// A Tap's log records the wall-clock time its Starts count from.
func TestLogOrigin(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	l, err := CreateFileLog(path)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	tap := NewTap(mem.New(), l)
	if err := tap.Write(context.Background(), []backend.Item{{Addr: "a", Value: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd, err := NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if o := rd.Origin(); o.Before(before.Add(-time.Second)) || o.After(time.Now()) {
		t.Fatalf("origin %v, want the Tap's creation (about %v)", o, before)
	}
	if err := l.SetOrigin(time.Now()); err == nil {
		t.Fatal("SetOrigin after a record was written was accepted")
	}
}

// TestFlushedLogOrigin: a Flushed log's header holds the origin of the
// Tap created over it after, so that each record's origin plus Start is
// when its call began, however long after the log the Tap was created.
func TestFlushedLogOrigin(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	l, err := CreateFileLog(path)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := l.Flushed()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	tap := NewTap(mem.New(), sink)
	before := time.Now()
	if err := tap.Write(context.Background(), []backend.Item{{Addr: "a", Value: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	records, origin, err := readAll(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(records) != 1 {
		t.Fatalf("%d records, want 1", len(records))
	}
	if began := origin.Add(records[0].Start); began.Before(before) {
		t.Fatalf("the call began at %v by the log, %v before it did", began, before.Sub(began))
	}
	if err := sink.(interface{ SetOrigin(time.Time) error }).SetOrigin(time.Now()); err == nil {
		t.Fatal("SetOrigin after a record was accepted")
	}
}

// Merge interleaves logs by wall-clock start and renumbers them.
func TestMerge(t *testing.T) {
	dir := t.TempDir()
	base := time.Unix(1_800_000_000, 0)
	write := func(name string, origin time.Time, recs []Record) string {
		p := filepath.Join(dir, name)
		l, err := CreateFileLog(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.SetOrigin(origin); err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if err := l.Record(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a", base, []Record{{Seq: 1, Start: 0, Op: OpRead, Addrs: []string{"a1"}, Sizes: []int{1}},
		{Seq: 2, Start: 30 * time.Millisecond, Op: OpWrite, Addrs: []string{"a2"}, Sizes: []int{1}, Fence: "f", Token: 3}})
	b := write("b", base.Add(10*time.Millisecond), []Record{{Seq: 1, Start: 5 * time.Millisecond, Op: OpRead, Addrs: []string{"b1"}, Sizes: []int{1}},
		{Seq: 2, Start: 20 * time.Millisecond, Op: OpRead, Addrs: []string{"b2"}, Sizes: []int{1}}})
	out := filepath.Join(dir, "merged")
	n, err := Merge(out, b, a)
	if err != nil || n != 4 {
		t.Fatalf("Merge = %d, %v", n, err)
	}
	got, origin, err := readAll(out)
	if err != nil || !origin.Equal(base) {
		t.Fatalf("merged log: origin %v, %v; want %v", origin, err, base)
	}
	var order []string
	for i, r := range got {
		order = append(order, fmt.Sprintf("%d:%s@%v", r.Seq, r.Addrs[0], r.Start))
		if r.Seq != uint64(i+1) {
			t.Fatalf("record %d numbered %d", i, r.Seq)
		}
	}
	want := []string{"1:a1@0s", "2:b1@15ms", "3:b2@30ms", "4:a2@30ms"} // a tie keeps the order of the paths: b, then a
	if !slices.Equal(order, want) {
		t.Fatalf("merged order %v, want %v", order, want)
	}
	if got[3].Fence != "f" || got[3].Token != 3 {
		t.Fatalf("the fenced write lost its fence: %+v", got[3])
	}
}

// TestCheckFenceOrder: a fenced write accepted with a token below one
// accepted before on its fence is reported; the same write refused, or
// on another fence, is not.
func TestCheckFenceOrder(t *testing.T) {
	w := func(fence string, token uint64, refused bool) Record {
		return Record{Seq: token, Op: OpWrite, Addrs: []string{"a"}, Fence: fence, Token: token, Err: refused}
	}
	for _, c := range []struct {
		name    string
		records []Record
		bad     bool
	}{
		{"rising", []Record{w("f", 1, false), w("f", 2, false), w("f", 2, false)}, false},
		{"late write refused", []Record{w("f", 2, false), w("f", 1, true)}, false},
		{"other fence", []Record{w("f", 2, false), w("g", 1, false)}, false},
		{"late write accepted", []Record{w("f", 2, false), w("f", 1, false)}, true},
	} {
		if err := CheckFenceOrder(c.records); (err != nil) != c.bad {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
