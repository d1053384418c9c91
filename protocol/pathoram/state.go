package pathoram

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/oblivkv/oblivkv/internal/sealedstate"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// stateAddr holds the saved state (internal/sealedstate: sealed chunks of
// at most Options.BatchBytes under a header written last).
const stateAddr = statePrefix + "s"

const stateMagic = "oblivkv pathoram state v1\n"

// saveState writes the trusted state to storage; s.mu is held.
func (s *store) saveState(ctx context.Context) error {
	return sealedstate.SaveBytes(ctx, s.b, s.keys, stateAddr, s.encodeState(), s.opts.BatchBytes)
}

// loadState reads the saved state, installs it and deletes it from
// storage, so that a crash from now on is detected at the next open.
func (s *store) loadState(ctx context.Context) error {
	plain, err := sealedstate.LoadBytes(ctx, s.b, s.keys, stateAddr)
	if err != nil {
		return fmt.Errorf("pathoram: reading saved state: %w", err)
	}
	if err := s.decodeState(plain); err != nil {
		return err
	}
	if err := sealedstate.Delete(ctx, s.b, s.keys, stateAddr); err != nil {
		return fmt.Errorf("pathoram: deleting the loaded state: %w", err)
	}
	return nil
}

// encodeState serialises the trusted state: parameters, position map,
// stash, stash high-water mark and bucket versions.
func (s *store) encodeState() []byte {
	o, r := s.o, s.remote
	idLen := len(tree.BlockID{})
	b := make([]byte, 0, len(stateMagic)+len(o.pos)*(idLen+4)+len(r.versions)*3+64)
	b = append(b, stateMagic...)
	for _, v := range []int{o.g.L, o.z, s.codec.ValueSize(), len(o.pos)} {
		b = binary.AppendUvarint(b, uint64(v))
	}
	for id, leaf := range o.pos {
		b = append(b, id[:]...)
		b = binary.AppendUvarint(b, leaf)
	}
	b = binary.AppendUvarint(b, uint64(len(o.stash)))
	for _, e := range o.stash {
		b = append(b, e.id[:]...)
		b = binary.AppendUvarint(b, uint64(len(e.val)))
		b = append(b, e.val...)
	}
	b = binary.AppendUvarint(b, uint64(o.stashMax))
	b = binary.AppendUvarint(b, uint64(len(r.versions)))
	for _, v := range r.versions {
		b = binary.AppendUvarint(b, v)
	}
	return b
}

// decodeState installs an encoded state after checking it against the
// store's parameters.
func (s *store) decodeState(plain []byte) error {
	d := decoder{buf: plain}
	if !bytes.HasPrefix(plain, []byte(stateMagic)) {
		return fmt.Errorf("pathoram: saved state has an unknown format")
	}
	d.buf = d.buf[len(stateMagic):]
	o, r := s.o, s.remote
	L, z, vs := d.uvarint(), d.uvarint(), d.uvarint()
	// A mismatch of L or the value size is caught by kv's metadata record
	// (capacity, value size) before this; Z is pathoram's own.
	if d.err == nil && (L != uint64(o.g.L) || vs != uint64(s.codec.ValueSize())) {
		return fmt.Errorf("pathoram: saved state is for a tree of %d levels and %d-byte values; this store has %d and %d",
			L, vs, o.g.L, s.codec.ValueSize())
	}
	if d.err == nil && z != uint64(o.z) {
		return fmt.Errorf("%w: the store was created with Z=%d, opened with Z=%d", kv.ErrMismatch, z, o.z)
	}
	npos := d.count()
	pos := make(map[tree.BlockID]uint64, npos)
	for n := npos; n > 0 && d.err == nil; n-- {
		id, leaf := d.id(), d.uvarint()
		pos[id] = leaf
		d.check(leaf < o.g.Leaves() && len(pos) <= o.capacity, "position map")
	}
	var stash []entry
	for n := d.count(); n > 0 && d.err == nil; n-- {
		id, val := d.id(), d.bytes(s.codec.ValueSize())
		leaf, ok := pos[id]
		d.check(ok, "stash block without a position")
		stash = append(stash, entry{id: id, leaf: leaf, val: val})
	}
	stashMax := d.uvarint()
	d.check(d.uvarint() == uint64(len(r.versions)), "bucket count")
	versions := make([]uint64, len(r.versions))
	for i := range versions {
		versions[i] = d.uvarint()
	}
	d.check(len(d.buf) == 0, "trailing bytes")
	if d.err != nil {
		return d.err
	}
	o.pos, o.stash, o.stashMax, r.versions = pos, stash, int(stashMax), versions
	return nil
}

// decoder reads the state encoding, remembering the first error.
type decoder struct {
	buf []byte
	err error
}

var errMalformed = errors.New("pathoram: saved state is malformed")

func (d *decoder) check(ok bool, what string) {
	if !ok && d.err == nil {
		d.err = fmt.Errorf("%w: %s", errMalformed, what)
	}
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.buf)
	d.check(n > 0, "number")
	if n > 0 {
		d.buf = d.buf[n:]
	}
	return v
}

// count reads a number of items, which cannot exceed the bytes left.
func (d *decoder) count() uint64 {
	n := d.uvarint()
	d.check(n <= uint64(len(d.buf)), "count")
	return n
}

func (d *decoder) id() tree.BlockID {
	var id tree.BlockID
	d.check(len(d.buf) >= len(id), "block id")
	if d.err == nil {
		d.buf = d.buf[copy(id[:], d.buf):]
	}
	return id
}

func (d *decoder) bytes(limit int) []byte {
	n := d.uvarint()
	d.check(n <= uint64(limit) && n <= uint64(len(d.buf)), "value")
	if d.err != nil {
		return nil
	}
	v := bytes.Clone(d.buf[:n])
	d.buf = d.buf[n:]
	return v
}
