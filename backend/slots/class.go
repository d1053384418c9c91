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
	"unsafe"

	"github.com/cockroachdb/pebble/vfs"
)

// inlineMax is the largest value kept in the index itself instead of a
// slot: fence tokens and the journal's sealed anchor. Anything larger goes
// to a slot (treebeard's sealed bucket metadata, about 170 bytes, is
// rewritten at every access: kept inline, it took memory in the Go heap
// for every bucket).
const inlineMax = 64

// slotSize returns the slot size of a value of n bytes (n > inlineMax)
// with its header:
// n rounded up to a multiple of a granule that grows with n, 1/32 of the
// power of two at or above n and at least 256 bytes, so a slot above 4 KiB
// wastes under 1/16 of itself, and a store whose values have few sizes
// has few slot files.
func slotSize(n int) int64 {
	n += headerSize
	granule := max(256, 1<<max(0, bits.Len(uint(n-1))-5))
	return int64((n + granule - 1) / granule * granule)
}

// class is the slot file of one slot size: slot i lies at i*size. Its
// free list holds the slots no index entry names; next is the first slot
// past every slot ever handed out.
type class struct {
	id   uint16 // its position in classes.list, from 1
	size int64
	file vfs.File // immutable once the class exists: reads need no lock

	mu   sync.Mutex
	free []uint32
	next uint32
}

// take returns a slot nothing refers to.
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
// pointer for the garbage collector to follow), and the stamp its value
// was written with. The zero loc is no slot.
type loc struct {
	class uint16
	slot  uint32
	stamp uint64
}

func (l loc) valid() bool { return l.class != 0 }

// A slot holds a header of headerSize bytes (the value's length, a
// checksum of the address, stamp and value, and the stamp), then the
// value. The stamp is drawn at random for each slot a value is put in,
// and the index entry holds it too: a slot that still holds an earlier
// value of the same address, which its checksum alone would pass, fails
// to match it.
const headerSize = 16

// slotOf puts in buf what l holds with addr's value v.
func (l loc) slotOf(buf []byte, addr string, v []byte) []byte {
	out := append(buf[:0], make([]byte, headerSize)...)
	binary.BigEndian.PutUint32(out, uint32(len(v)))
	binary.BigEndian.PutUint64(out[8:], l.stamp)
	binary.BigEndian.PutUint32(out[4:], checksum(addr, out[8:16], v))
	return append(out, v...)
}

// buffers hold slots on their way to a file.
var buffers = sync.Pool{New: func() any { return new([]byte) }}

// write stores addr's value v in l.
func (cs *classes) write(l loc, addr string, v []byte) error {
	c := cs.get(l.class)
	buf := buffers.Get().(*[]byte)
	*buf = l.slotOf(*buf, addr, v)
	_, err := c.file.WriteAt(*buf, int64(l.slot)*c.size)
	buffers.Put(buf)
	return err
}

// read returns the value at l and whether it is addr's value: a slot torn
// by a crash, or holding another address's value, fails the checksum.
func (cs *classes) read(l loc, addr string) ([]byte, bool, error) {
	c := cs.get(l.class)
	buf := make([]byte, c.size)
	got, err := c.file.ReadAt(buf, int64(l.slot)*c.size)
	if err != nil && !(errors.Is(err, io.EOF) && got >= headerSize) { // the file's last slot ends with its value
		return nil, false, err
	}
	n := int64(binary.BigEndian.Uint32(buf))
	if n > int64(got)-headerSize {
		return nil, false, nil
	}
	v := buf[headerSize : headerSize+n : headerSize+n]
	ok := checksum(addr, buf[8:16], v) == binary.BigEndian.Uint32(buf[4:]) && binary.BigEndian.Uint64(buf[8:]) == l.stamp
	return v, ok, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checksum covers the address (and its length) and the stamp as well as
// the value, so a slot holding another address's value never passes for
// this one's.
func checksum(addr string, stamp, v []byte) uint32 {
	var n [binary.MaxVarintLen64]byte
	sum := crc32.Checksum(n[:binary.PutUvarint(n[:], uint64(len(addr)))], castagnoli)
	sum = crc32.Update(sum, castagnoli, unsafe.Slice(unsafe.StringData(addr), len(addr)))
	sum = crc32.Update(sum, castagnoli, stamp)
	return crc32.Update(sum, castagnoli, v)
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
// directory is synced before any index entry can name it) if need be.
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

// find returns the class of slot size size, nil if it has no file.
func (cs *classes) find(size int64) *class {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.bySize[size]
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

// rebuild sets every class's free list and next slot from the slots the
// index names (used, by class).
func (cs *classes) rebuild(used map[uint16][]uint32) {
	for _, c := range cs.all() {
		taken := used[c.id]
		slices.Sort(taken)
		c.free, c.next = nil, 0
		if len(taken) > 0 {
			c.next = taken[len(taken)-1] + 1
		}
		for s, i := uint32(0), 0; s < c.next; s++ {
			if i < len(taken) && taken[i] == s {
				i++
				continue
			}
			c.free = append(c.free, s)
		}
	}
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

// isShortRead reports a read past the end of a slot file: a slot whose
// file never grew to it durably.
func isShortRead(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}
