package backup

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"path/filepath"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/seal"
)

// Format is the archive format this build writes and reads.
const Format = 1

// An archive is, in order:
//
//	magic      "oblivkv backup\n"
//	header     uvarint length, JSON (Header)
//	entries    each a kind byte and its fields, every length a uvarint:
//	           'F' name, size, bytes: a file of the journal directory
//	           'I' address, value:    one storage address and its bytes
//	'E'        the end of the entries
//	summary    uvarint length, JSON (Summary): counts and sizes
//	trailer    the SHA-256 of everything above, then its MAC
//	           (seal.Keys.ArchiveMAC), 32 bytes each
//
// Every file comes before every storage item. Nothing in it is sealed by
// the archive: the journal's files and storage's values are sealed already.
const magic = "oblivkv backup\n"

const (
	kindFile  byte = 'F'
	kindItem  byte = 'I'
	kindEnd   byte = 'E'
	digestLen      = sha256.Size
)

// Limits a reader puts on lengths before it allocates.
const (
	maxHeader = 1 << 20
	maxName   = 4 << 10
	maxAddr   = 64 << 10
	maxValue  = 256 << 20
)

// ErrDamaged reports an archive that is not whole: truncated, altered, or
// not an archive at all.
var ErrDamaged = errors.New("backup: the archive is damaged (truncated or altered)")

// ErrWrongKey reports an archive whose MAC does not match under the key
// given: another store's key, or an archive forged without the key.
var ErrWrongKey = errors.New("backup: the archive's MAC does not match under this key (another store's key file, or a forged archive)")

// Header describes the store an archive holds.
type Header struct {
	Format      int               `json:"format"`
	Protocol    string            `json:"protocol"`
	Capacity    int               `json:"capacity"`
	ValueSize   int               `json:"value_size"`
	MaxKeySize  int               `json:"max_key_size"`
	Options     map[string]string `json:"options"`
	Fingerprint string            `json:"fingerprint"`
	// Anchor is the journal position storage's anchor names: the
	// archive's position. The journal's records after it, if any, are
	// replayed at the first start after a restore, as after a crash.
	Anchor uint64 `json:"anchor"`
	// Incarnation is the journal's incarnation when the copy was taken.
	Incarnation uint64    `json:"incarnation"`
	Time        time.Time `json:"time"`
	// Backend is the kind of storage copied ("disk", "redis"), never its
	// address.
	Backend string `json:"backend"`
	// Online says the copy was taken by a running server.
	Online bool `json:"online"`
}

// Summary counts an archive's entries.
type Summary struct {
	Files     int   `json:"files"`
	FileBytes int64 `json:"file_bytes"`
	Items     int   `json:"items"`
	ItemBytes int64 `json:"item_bytes"` // addresses and values
}

// Writer writes an archive to a stream, hashing as it goes.
type Writer struct {
	w       *bufio.Writer
	h       hash.Hash
	keys    *seal.Keys
	sum     Summary
	inItems bool
}

// NewWriter starts an archive on w: the magic and h. keys make the MAC.
func NewWriter(w io.Writer, h Header, keys *seal.Keys) (*Writer, error) {
	aw := &Writer{h: sha256.New(), keys: keys}
	aw.w = bufio.NewWriterSize(io.MultiWriter(w, aw.h), 1<<20)
	h.Format = Format
	js, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	aw.w.WriteString(magic)
	aw.bytes(js)
	// The header goes out at once: a server's client learns the copy
	// has begun (Fetch).
	if err := aw.w.Flush(); err != nil {
		return nil, fmt.Errorf("backup: writing the archive: %w", err)
	}
	return aw, nil
}

func (aw *Writer) uvarint(n uint64) {
	var b [binary.MaxVarintLen64]byte
	aw.w.Write(b[:binary.PutUvarint(b[:], n)])
}

func (aw *Writer) bytes(b []byte) {
	aw.uvarint(uint64(len(b)))
	aw.w.Write(b)
}

// File adds a file of the journal directory: its path relative to it
// (slash-separated) and size bytes from r.
func (aw *Writer) File(name string, size int64, r io.Reader) error {
	if aw.inItems {
		return errors.New("backup: a file after storage items")
	}
	aw.w.WriteByte(kindFile)
	aw.bytes([]byte(name))
	aw.uvarint(uint64(size))
	if n, err := io.CopyN(aw.w, r, size); err != nil {
		return fmt.Errorf("backup: copying %s (%d of %d bytes): %w", name, n, size, err)
	}
	aw.sum.Files++
	aw.sum.FileBytes += size
	return nil
}

// Items adds storage addresses with their values.
func (aw *Writer) Items(items []backend.Item) error {
	aw.inItems = true
	for _, it := range items {
		aw.w.WriteByte(kindItem)
		aw.bytes([]byte(it.Addr))
		aw.bytes(it.Value)
		aw.sum.Items++
		aw.sum.ItemBytes += int64(len(it.Addr) + len(it.Value))
	}
	return nil
}

// Close ends the archive: the end mark, the summary and the trailer. It
// returns the summary and the archive's digest.
func (aw *Writer) Close() (Summary, []byte, error) {
	aw.w.WriteByte(kindEnd)
	js, err := json.Marshal(aw.sum)
	if err != nil {
		return Summary{}, nil, err
	}
	aw.bytes(js)
	if err := aw.w.Flush(); err != nil {
		return Summary{}, nil, fmt.Errorf("backup: writing the archive: %w", err)
	}
	digest := aw.h.Sum(nil)
	aw.w.Write(digest)
	aw.w.Write(aw.keys.ArchiveMAC(digest))
	if err := aw.w.Flush(); err != nil {
		return Summary{}, nil, fmt.Errorf("backup: writing the archive: %w", err)
	}
	return aw.sum, digest, nil
}

// Visitor receives an archive's entries as Read walks it. Either func may
// be nil: the entries are then read and hashed, and dropped.
type Visitor struct {
	// File receives each journal file; it must read r to its end or
	// return an error.
	File func(name string, size int64, r io.Reader) error
	// Items receives storage items in batches; it must not keep the
	// slice.
	Items func([]backend.Item) error
}

// Contents is what Read found in a whole archive.
type Contents struct {
	Header  Header
	Summary Summary
	Digest  []byte
	// MACChecked says the MAC was checked (Read was given keys).
	MACChecked bool
}

// DigestHex returns the archive's digest in hex.
func (c Contents) DigestHex() string { return hex.EncodeToString(c.Digest) }

// itemBatch is how many storage items Read hands Visitor.Items at once.
const itemBatch = 512

// Read walks a whole archive from r, handing v its entries, and checks
// its structure, its summary and its digest, and with keys (nil: none)
// its MAC. An entry is handed over before the digest is checked: a caller
// that must write nothing of a damaged archive reads it through once
// with an empty Visitor first.
func Read(r io.Reader, keys *seal.Keys, v Visitor) (Contents, error) {
	src := &hashReader{r: bufio.NewReaderSize(r, 1<<20), h: sha256.New()}
	c, err := readBody(src, v)
	if err != nil {
		return c, err
	}
	c.Digest = src.h.Sum(nil)
	var trailer [2 * digestLen]byte
	if _, err := io.ReadFull(src.r, trailer[:]); err != nil {
		return c, fmt.Errorf("%w: the trailer is missing", ErrDamaged)
	}
	if _, err := src.r.ReadByte(); err != io.EOF {
		return c, fmt.Errorf("%w: bytes follow the trailer", ErrDamaged)
	}
	if !bytes.Equal(trailer[:digestLen], c.Digest) {
		return c, fmt.Errorf("%w: its SHA-256 digest does not match its contents", ErrDamaged)
	}
	if keys != nil {
		if !hmac.Equal(trailer[digestLen:], keys.ArchiveMAC(c.Digest)) {
			return c, ErrWrongKey
		}
		c.MACChecked = true
	}
	return c, nil
}

// readBody reads everything before the trailer.
func readBody(src *hashReader, v Visitor) (Contents, error) {
	var c Contents
	m := make([]byte, len(magic))
	if err := src.full(m); err != nil || string(m) != magic {
		return c, fmt.Errorf("%w: not an oblivkv backup archive", ErrDamaged)
	}
	if err := src.json(maxHeader, &c.Header); err != nil {
		return c, fmt.Errorf("%w: the header: %w", ErrDamaged, err)
	}
	if c.Header.Format != Format {
		return c, fmt.Errorf("backup: archive format %d, this build reads %d", c.Header.Format, Format)
	}
	got, err := readEntries(src, v)
	if err != nil {
		return c, err
	}
	if err := src.json(maxHeader, &c.Summary); err != nil {
		return c, fmt.Errorf("%w: the summary: %w", ErrDamaged, err)
	}
	if got != c.Summary {
		return c, fmt.Errorf("%w: it holds %+v, its summary says %+v", ErrDamaged, got, c.Summary)
	}
	return c, nil
}

// readEntries reads the entries up to the end mark, counting them.
func readEntries(src *hashReader, v Visitor) (Summary, error) {
	var sum Summary
	items := make([]backend.Item, 0, itemBatch)
	flush := func() error {
		if len(items) == 0 || v.Items == nil {
			items = items[:0]
			return nil
		}
		err := v.Items(items)
		items = items[:0]
		return err
	}
	for {
		kind, err := src.byte()
		if err != nil {
			return sum, fmt.Errorf("%w: it ends before its end mark", ErrDamaged)
		}
		switch {
		case kind == kindEnd:
			return sum, flush()
		case kind == kindFile && sum.Items == 0:
			n, err := readFileEntry(src, v)
			if err != nil {
				return sum, err
			}
			sum.Files++
			sum.FileBytes += n
		case kind == kindItem:
			it, err := readItem(src)
			if err != nil {
				return sum, err
			}
			items = append(items, it)
			sum.Items++
			sum.ItemBytes += int64(len(it.Addr) + len(it.Value))
			if len(items) == itemBatch {
				if err := flush(); err != nil {
					return sum, err
				}
			}
		default:
			return sum, fmt.Errorf("%w: an entry of kind %q where none may be", ErrDamaged, kind)
		}
	}
}

func readFileEntry(src *hashReader, v Visitor) (int64, error) {
	name, err := src.bytes(maxName)
	if err != nil {
		return 0, fmt.Errorf("%w: a file name: %w", ErrDamaged, err)
	}
	if !filepath.IsLocal(filepath.FromSlash(string(name))) {
		return 0, fmt.Errorf("%w: a file named %q, outside the journal directory", ErrDamaged, name)
	}
	size, err := src.uvarint()
	if err != nil || size > 1<<40 {
		return 0, fmt.Errorf("%w: the size of %s", ErrDamaged, name)
	}
	body := &io.LimitedReader{R: src, N: int64(size)}
	if v.File != nil {
		err = v.File(string(name), int64(size), body)
	}
	if _, cerr := io.Copy(io.Discard, body); err == nil {
		err = cerr
	}
	if err == nil && body.N > 0 {
		err = fmt.Errorf("%w: file %s is cut short", ErrDamaged, name)
	}
	return int64(size), err
}

func readItem(src *hashReader) (backend.Item, error) {
	addr, err := src.bytes(maxAddr)
	if err != nil {
		return backend.Item{}, fmt.Errorf("%w: a storage address: %w", ErrDamaged, err)
	}
	val, err := src.bytes(maxValue)
	if err != nil {
		return backend.Item{}, fmt.Errorf("%w: the value of a storage address: %w", ErrDamaged, err)
	}
	return backend.Item{Addr: string(addr), Value: val}, nil
}

// hashReader reads an archive, hashing every byte it hands out.
type hashReader struct {
	r *bufio.Reader
	h hash.Hash
}

func (s *hashReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.h.Write(p[:n])
	return n, err
}

func (s *hashReader) byte() (byte, error) {
	b, err := s.r.ReadByte()
	if err == nil {
		s.h.Write([]byte{b})
	}
	return b, err
}

func (s *hashReader) uvarint() (uint64, error) {
	return binary.ReadUvarint(byteReader{s})
}

func (s *hashReader) full(p []byte) error {
	_, err := io.ReadFull(s, p)
	return err
}

// bytes reads a length (at most limit) and that many bytes.
func (s *hashReader) bytes(limit uint64) ([]byte, error) {
	n, err := s.uvarint()
	if err != nil {
		return nil, err
	}
	if n > limit {
		return nil, fmt.Errorf("a length of %d bytes, more than %d", n, limit)
	}
	b := make([]byte, n)
	if err := s.full(b); err != nil {
		return nil, err
	}
	return b, nil
}

func (s *hashReader) json(limit uint64, v any) error {
	b, err := s.bytes(limit)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// byteReader is a hashReader as an io.ByteReader.
type byteReader struct{ s *hashReader }

func (b byteReader) ReadByte() (byte, error) { return b.s.byte() }
