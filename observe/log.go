package observe

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"
)

// The log file format: the 8-byte magic "OKVTAP3\n", the origin (the
// wall-clock time the Tap's Start durations count from, Unix nanoseconds,
// 8 bytes big-endian), then one frame per Record, each field an unsigned
// varint unless noted:
//
//	seq, start (ns), took (ns), op (1 byte), flags (1 byte), n,
//	then n times: address length, address bytes, size,
//	then, if the call was a fenced write: fence length, fence bytes, token.
//
// flags is flagErr if the call failed, plus flagFenced for a fenced
// write. It is compact (a path read of 20 buckets is about 400 bytes) and
// streamable; Reader decodes it. Version 2 (logMagicV2) is the same with
// no origin, version 1 (logMagicV1) also without fenced writes, and
// Reader reads both.
const (
	logMagic   = "OKVTAP3\n"
	logMagicV2 = "OKVTAP2\n"
	logMagicV1 = "OKVTAP1\n"
	// logHeaderSize is a version 3 header's: the magic and the origin.
	logHeaderSize = len(logMagic) + 8
)

// The bits of a frame's flags byte.
const (
	flagErr    = 1 << 0
	flagFenced = 1 << 1
)

// MemoryLog is a Sink that keeps every Record in memory, for tests.
type MemoryLog struct {
	mu      sync.Mutex
	records []Record
}

// Record implements Sink.
func (m *MemoryLog) Record(r Record) error {
	m.mu.Lock()
	m.records = append(m.records, r)
	m.mu.Unlock()
	return nil
}

// Records returns a copy of the records so far.
func (m *MemoryLog) Records() []Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Record(nil), m.records...)
}

// LastSeq returns the sequence number of the last record, or 0 when
// there is none, without copying the records.
func (m *MemoryLog) LastSeq() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.records) == 0 {
		return 0
	}
	return m.records[len(m.records)-1].Seq
}

// Reset forgets every record.
func (m *MemoryLog) Reset() {
	m.mu.Lock()
	m.records = nil
	m.mu.Unlock()
}

// FileLog is a Sink that writes the binary log format to a file. Its
// header's origin is the Tap's (NewTap calls SetOrigin), or the time the
// log was created.
type FileLog struct {
	f        *os.File
	w        *bufio.Writer
	buf      []byte
	origin   time.Time
	headed   bool // the header is written
	recorded bool // a record is written
}

// CreateFileLog creates (or truncates) path; the header is written with
// the first record, or by SetOrigin or Close.
func CreateFileLog(path string) (*FileLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("observe: creating tap log: %w", err)
	}
	return &FileLog{f: f, w: bufio.NewWriterSize(f, 1<<20), origin: time.Now()}, nil
}

// SetOrigin sets the time the records' Start durations count from and
// writes the header, over the one written already (Flushed) if any; it
// fails once a record is written.
func (l *FileLog) SetOrigin(t time.Time) error {
	if l.recorded {
		return errors.New("observe: the tap log's origin is set once, before any record")
	}
	l.origin = t
	if !l.headed {
		return l.head()
	}
	if err := l.w.Flush(); err != nil {
		return err
	}
	_, err := l.f.WriteAt(l.header(), 0)
	return err
}

// head writes the header once.
func (l *FileLog) head() error {
	if l.headed {
		return nil
	}
	l.headed = true
	_, err := l.w.Write(l.header())
	return err
}

// header returns the header: the magic and the origin.
func (l *FileLog) header() []byte {
	return binary.BigEndian.AppendUint64([]byte(logMagic), uint64(l.origin.UnixNano()))
}

// Record implements Sink.
func (l *FileLog) Record(r Record) error {
	if err := l.head(); err != nil {
		return err
	}
	l.recorded = true
	b := l.buf[:0]
	b = binary.AppendUvarint(b, r.Seq)
	b = binary.AppendUvarint(b, uint64(r.Start))
	b = binary.AppendUvarint(b, uint64(r.Took))
	b = append(b, byte(r.Op), flags(r))
	b = binary.AppendUvarint(b, uint64(len(r.Addrs)))
	for i, a := range r.Addrs {
		b = binary.AppendUvarint(b, uint64(len(a)))
		b = append(b, a...)
		size := 0
		if i < len(r.Sizes) {
			size = r.Sizes[i]
		}
		b = binary.AppendUvarint(b, uint64(size))
	}
	if r.Fence != "" {
		b = binary.AppendUvarint(b, uint64(len(r.Fence)))
		b = append(b, r.Fence...)
		b = binary.AppendUvarint(b, r.Token)
	}
	l.buf = b
	_, err := l.w.Write(b)
	return err
}

// flags returns the flags byte of r's frame.
func flags(r Record) byte {
	var f byte
	if r.Err {
		f |= flagErr
	}
	if r.Fence != "" {
		f |= flagFenced
	}
	return f
}

// Flushed writes l's header and returns a Sink that writes each record to
// l at once: a process that may be killed (a cluster's) loses none of the
// calls it recorded, and its log is one even if it recorded none.
func (l *FileLog) Flushed() (Sink, error) {
	if err := errors.Join(l.head(), l.w.Flush()); err != nil {
		return nil, err
	}
	return flushedLog{l}, nil
}

type flushedLog struct{ l *FileLog }

// SetOrigin is FileLog's (NewTap calls it on the Sink it is given).
func (f flushedLog) SetOrigin(t time.Time) error { return f.l.SetOrigin(t) }

func (f flushedLog) Record(r Record) error {
	return errors.Join(f.l.Record(r), f.l.w.Flush())
}

// Close flushes and closes the file.
func (l *FileLog) Close() error {
	err := errors.Join(l.head(), l.w.Flush())
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Reader decodes a log written by FileLog.
type Reader struct {
	r      *bufio.Reader
	origin time.Time
}

// NewReader checks the header of a log and returns a Reader positioned at
// its first record.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	head := make([]byte, len(logMagic))
	if _, err := io.ReadFull(br, head); err != nil {
		return nil, errors.New("observe: not a tap log (bad header)")
	}
	rd := &Reader{r: br}
	switch string(head) {
	case logMagicV1, logMagicV2:
		return rd, nil
	case logMagic:
		var origin [8]byte
		if _, err := io.ReadFull(br, origin[:]); err != nil {
			return nil, errors.New("observe: tap log header cut short")
		}
		rd.origin = time.Unix(0, int64(binary.BigEndian.Uint64(origin[:])))
		return rd, nil
	}
	return nil, errors.New("observe: not a tap log (bad header)")
}

// Origin is the wall-clock time the records' Start durations count from;
// the zero time for a log of a version that did not record it.
func (rd *Reader) Origin() time.Time { return rd.origin }

// maxLogAddr bounds one decoded address, so a corrupt log cannot make the
// reader allocate without limit.
const maxLogAddr = 1 << 20

// Next returns the next record, or io.EOF after the last one.
func (rd *Reader) Next() (Record, error) {
	_, err := rd.r.Peek(1)
	if err == io.EOF {
		return Record{}, io.EOF
	}
	f := frame{r: rd.r}
	if err != nil {
		f.fail(err)
	}
	r := Record{Seq: f.uvarint(), Start: time.Duration(f.uvarint()), Took: time.Duration(f.uvarint())}
	r.Op = Op(f.byte())
	flags := f.byte()
	r.Err = flags&flagErr != 0
	for n := f.uvarint(); n > 0 && f.err == nil; n-- {
		r.Addrs = append(r.Addrs, f.addr())
		r.Sizes = append(r.Sizes, int(f.uvarint()))
	}
	if flags&flagFenced != 0 {
		r.Fence, r.Token = f.addr(), f.uvarint()
	}
	if f.err != nil {
		return Record{}, f.err
	}
	return r, nil
}

// frame reads the fields of one record, remembering the first error; a
// record that ends early is io.ErrUnexpectedEOF.
type frame struct {
	r   *bufio.Reader
	err error
}

func (f *frame) fail(err error) {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if f.err == nil {
		f.err = fmt.Errorf("observe: truncated record: %w", err)
	}
}

func (f *frame) uvarint() uint64 {
	if f.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(f.r)
	if err != nil {
		f.fail(err)
	}
	return v
}

func (f *frame) byte() byte {
	if f.err != nil {
		return 0
	}
	b, err := f.r.ReadByte()
	if err != nil {
		f.fail(err)
	}
	return b
}

func (f *frame) addr() string {
	n := f.uvarint()
	if f.err == nil && n > maxLogAddr {
		f.err = fmt.Errorf("observe: corrupt record: address of %d bytes", n)
	}
	if f.err != nil {
		return ""
	}
	a := make([]byte, n)
	if _, err := io.ReadFull(f.r, a); err != nil {
		f.fail(err)
	}
	return string(a)
}

// ReadFile decodes a whole log file. After an error it returns the
// records before it.
func ReadFile(path string) ([]Record, error) {
	recs, _, err := readAll(path)
	return recs, err
}

// readAll decodes a whole log file and its origin.
func readAll(path string) ([]Record, time.Time, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer f.Close()
	rd, err := NewReader(f)
	if err != nil {
		return nil, time.Time{}, err
	}
	var out []Record
	for {
		r, err := rd.Next()
		if err == io.EOF {
			return out, rd.Origin(), nil
		}
		if err != nil {
			return out, rd.Origin(), err
		}
		out = append(out, r)
	}
}

// Merge writes to out the records of the logs at paths, in the order of
// their wall-clock start (each log's origin plus the record's Start),
// under the earliest origin and numbered again from 1: the storage
// operator's view of several processes as one log (the shards of a
// cluster, or the old and the new leader of one group). Records that
// start at the same time keep the order of paths, then their own. A log
// of version 1 or 2 has no origin and is refused. It returns how many
// records it wrote.
func Merge(out string, paths ...string) (int, error) {
	type timed struct {
		at time.Time
		r  Record
	}
	var all []timed
	var origin time.Time
	for _, p := range paths {
		recs, o, err := readWithOrigin(p)
		if err != nil {
			return 0, err
		}
		if origin.IsZero() || o.Before(origin) {
			origin = o
		}
		for _, r := range recs {
			all = append(all, timed{o.Add(r.Start), r})
		}
	}
	slices.SortStableFunc(all, func(a, b timed) int { return a.at.Compare(b.at) })
	l, err := CreateFileLog(out)
	if err != nil {
		return 0, err
	}
	if err := l.SetOrigin(origin); err != nil {
		l.Close()
		return 0, err
	}
	for i, t := range all {
		t.r.Seq, t.r.Start = uint64(i+1), t.at.Sub(origin)
		if err := l.Record(t.r); err != nil {
			l.Close()
			return 0, err
		}
	}
	return len(all), l.Close()
}

// readWithOrigin reads a whole log of version 3 and its origin.
func readWithOrigin(path string) ([]Record, time.Time, error) {
	recs, origin, err := readAll(path)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%s: %w", path, err)
	}
	if origin.IsZero() {
		return nil, time.Time{}, fmt.Errorf("observe: %s has no origin (a log of an earlier version): it cannot be merged by time", path)
	}
	return recs, origin, nil
}

// CheckFenceOrder reports a fenced write records show storage accepting
// with a token below one it had accepted before on the same fence: a
// deposed writer's late write that storage should have refused.
func CheckFenceOrder(records []Record) error {
	highest := map[string]uint64{}
	for _, r := range records {
		switch {
		case r.Fence == "" || r.Err:
		case r.Token < highest[r.Fence]:
			return fmt.Errorf("observe: call %d wrote with %s's token %d after storage had accepted %d", r.Seq, r.Fence, r.Token, highest[r.Fence])
		default:
			highest[r.Fence] = r.Token
		}
	}
	return nil
}
