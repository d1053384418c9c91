package slots

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/bits"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/vfs"
)

// slotSize returns the size of the slot that holds a value of n bytes at
// an address of addrLen bytes, with its header: their sum rounded up to
// a multiple of a granule that grows with it, 1/32 of the power of two at
// or above it and at least 256 bytes, so a slot above 4 KiB wastes under
// 1/16 of itself, and a store whose values have few sizes has few slot
// files.
func slotSize(addrLen, n int) int64 {
	n += headerSize + addrLen
	granule := max(256, 1<<max(0, bits.Len(uint(n-1))-5))
	return int64((n + granule - 1) / granule * granule)
}

// A slot holds a header, the address and the value:
//
//	[0:4]   the value's length, tombstone for a Delete
//	[4:8]   CRC-32C of everything after it: header, address and value
//	[8:16]  the generation of the Write that put it there
//	[16:18] the address's length
//	[18:22] the Write's count of slots, with acked set if the Write
//	        returned only once its slots were durable (per-write syncs)
//
// The address, the generation and the count let an open rebuild the index
// from the slots alone (load).
const (
	headerSize = 22
	tombstone  = math.MaxUint32
	maxAddrLen = math.MaxUint16
	acked      = 1 << 31
)

// class is the slot file of one slot size: slot i lies at i*size. Its
// free list holds the slots nothing needs; next is the first slot past
// every slot ever handed out.
type class struct {
	id   uint16 // its position in classes.list, from 1
	size int64
	file vfs.File // immutable once the class exists: reads need no lock

	mu   sync.Mutex
	free []uint32
	next uint32
}

// take returns a slot nothing needs.
func (c *class) take() (uint32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.free); n > 0 {
		s := c.free[n-1]
		c.free = c.free[:n-1]
		return s, nil
	}
	if c.next == math.MaxUint32 {
		return 0, fmt.Errorf("slots: the file of %d-byte slots is full", c.size)
	}
	c.next++
	return c.next - 1, nil
}

// release makes slots available again.
func (c *class) release(slots ...uint32) {
	c.mu.Lock()
	c.free = append(c.free, slots...)
	c.mu.Unlock()
}

// loc is a slot of a class (by its id, so the in-memory index holds no
// pointer for the garbage collector to follow), and the generation of
// the value in it. The zero loc is no slot.
type loc struct {
	class uint16
	slot  uint32
	gen   uint64
}

func (l loc) valid() bool { return l.class != 0 }

// buffers hold slots on their way to a file.
var buffers = sync.Pool{New: func() any { return new([]byte) }}

// write puts addr's value v (a tombstone if tomb) in l, for a Write of
// batch (see headerSize).
func (cs *classes) write(l loc, addr string, v []byte, tomb bool, batch uint32) error {
	c := cs.get(l.class)
	buf := buffers.Get().(*[]byte)
	out := append((*buf)[:0], make([]byte, headerSize)...)
	n := uint32(len(v))
	if tomb {
		n = tombstone
	}
	binary.BigEndian.PutUint32(out, n)
	binary.BigEndian.PutUint64(out[8:], l.gen)
	binary.BigEndian.PutUint16(out[16:], uint16(len(addr)))
	binary.BigEndian.PutUint32(out[18:], batch)
	out = append(append(out, addr...), v...)
	binary.BigEndian.PutUint32(out[4:], crc32.Checksum(out[8:], castagnoli))
	_, err := c.file.WriteAt(out, int64(l.slot)*c.size)
	*buf = out
	buffers.Put(buf)
	return err
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// read returns addr's value at l, and whether l holds it: a slot holding
// another address's value, or another generation's, does not.
func (cs *classes) read(l loc, addr string) ([]byte, bool, error) {
	c := cs.get(l.class)
	buf := make([]byte, c.size)
	got, err := c.file.ReadAt(buf, int64(l.slot)*c.size)
	if err != nil && !(errors.Is(err, io.EOF) && got >= headerSize) { // the file's last slot ends with its value
		return nil, false, err
	}
	h, ok := parseSlot(buf[:got])
	if !ok || h.tomb || h.gen != l.gen || string(h.addr) != addr {
		return nil, false, nil
	}
	return h.value, true, nil
}

// slotHeader is a parsed slot.
type slotHeader struct {
	gen   uint64
	tomb  bool
	batch uint32
	addr  []byte
	value []byte
}

// parseSlot parses the slot in b, reporting whether it is whole: a slot
// never written, or torn by a crash, is not.
func parseSlot(b []byte) (slotHeader, bool) {
	if len(b) < headerSize {
		return slotHeader{}, false
	}
	n, addrLen := binary.BigEndian.Uint32(b), int(binary.BigEndian.Uint16(b[16:]))
	end := headerSize + addrLen
	if n != tombstone {
		end += int(n)
	}
	if end > len(b) {
		return slotHeader{}, false
	}
	if crc32.Checksum(b[8:end], castagnoli) != binary.BigEndian.Uint32(b[4:]) {
		return slotHeader{}, false
	}
	h := slotHeader{gen: binary.BigEndian.Uint64(b[8:]), tomb: n == tombstone, batch: binary.BigEndian.Uint32(b[18:]),
		addr: b[headerSize : headerSize+addrLen]}
	h.value = b[headerSize+addrLen : end : end]
	return h, true
}

// classes owns the slot files of a directory.
type classes struct {
	fs       vfs.FS
	dir      string
	readOnly bool

	mu     sync.Mutex // held to add a class
	bySize map[int64]*class
	list   atomic.Pointer[[]*class] // by id - 1, replaced whole when one is added
}

// get returns the class of id.
func (cs *classes) get(id uint16) *class { return (*cs.list.Load())[id-1] }

// release makes the slots of locs free for reuse.
func (cs *classes) release(locs []loc) {
	for _, l := range locs {
		cs.get(l.class).release(l.slot)
	}
}

const fileSuffix = ".slots"

func classFile(dir string, size int64) string {
	return filepath.Join(dir, strconv.FormatInt(size, 10)+fileSuffix)
}

// openClasses opens every slot file in dir.
func openClasses(fs vfs.FS, dir string, readOnly bool) (*classes, error) {
	cs := &classes{fs: fs, dir: dir, readOnly: readOnly, bySize: map[int64]*class{}}
	cs.list.Store(&[]*class{})
	names, err := fs.List(dir)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	for _, name := range names {
		num, ok := strings.CutSuffix(name, fileSuffix)
		if !ok {
			continue
		}
		size, err := strconv.ParseInt(num, 10, 64)
		if err != nil || size <= 0 {
			return nil, fmt.Errorf("a slot file named %q", name)
		}
		if _, err := cs.open(size); err != nil {
			return nil, err
		}
	}
	return cs, nil
}

// of returns the class of slot size size, creating its file (durably: the
// directory is synced before any slot in it can count) if need be.
func (cs *classes) of(size int64) (*class, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if c := cs.bySize[size]; c != nil {
		return c, nil
	}
	c, err := cs.openLocked(size)
	if err != nil {
		return nil, err
	}
	return c, syncDir(cs.fs, cs.dir)
}

func (cs *classes) open(size int64) (*class, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.openLocked(size)
}

func (cs *classes) openLocked(size int64) (*class, error) {
	open := cs.fs.OpenReadWrite
	if cs.readOnly {
		open = cs.fs.Open
	}
	f, err := open(classFile(cs.dir, size))
	if err != nil {
		return nil, err
	}
	list := *cs.list.Load()
	if len(list) == math.MaxUint16 {
		f.Close()
		return nil, fmt.Errorf("slots: too many slot sizes")
	}
	c := &class{id: uint16(len(list) + 1), size: size, file: f}
	cs.bySize[size] = c
	list = append(slices.Clip(list), c)
	cs.list.Store(&list)
	return c, nil
}

// all returns every class.
func (cs *classes) all() []*class { return *cs.list.Load() }

// syncAll makes every slot written so far durable.
func (cs *classes) syncAll() error {
	for _, c := range cs.all() {
		if err := c.file.SyncData(); err != nil {
			return err
		}
	}
	return nil
}

func (cs *classes) close() error {
	var first error
	for _, c := range cs.all() {
		if err := c.file.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// syncDir makes dir's entries durable.
func syncDir(fs vfs.FS, dir string) error { return syncClose(fs.OpenDir(dir)) }

// syncClose syncs and closes f, the result of an open that failed if err
// is set.
func syncClose(f vfs.File, err error) error {
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
