package pathoram

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

const stateMagic = "oblivkv pathoram checkpoint v1\n"

// Journal records (internal/durable) carry, besides the sealed buckets
// each access writes, one of these deltas of the trusted state.
const (
	deltaAccess byte = iota + 1 // an access: its path, its block's position, the stash after it
	deltaLoad                   // a bulk load begins: the tree is rewritten whole
)

// journalDelta describes the access that just read leaf's path for block
// id: the position map's entry for id (its new leaf, or none) and the
// whole stash after the flush (usually a handful of blocks).
func (o *oram) journalDelta(leaf uint64, id tree.BlockID) []byte {
	b := append([]byte{deltaAccess}, id[:]...)
	b = binary.AppendUvarint(b, leaf)
	if nl, ok := o.pos[id]; ok {
		b = binary.AppendUvarint(append(b, 1), nl)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(o.stash)))
	for _, e := range o.stash {
		b = append(b, e.id[:]...)
		b = binary.AppendUvarint(b, uint64(len(e.val)))
		b = append(b, e.val...)
	}
	return b
}

// replay applies a journaled delta to the state; it reports whether the
// delta was the start of a bulk load that never checkpointed (the tree
// must then be written afresh).
func (s *store) replay(delta []byte) (load bool, err error) {
	d := decoder{buf: delta}
	o, r := s.o, s.remote
	if len(delta) == 0 {
		return false, fmt.Errorf("%w: empty journal delta", errMalformed)
	}
	d.buf = d.buf[1:]
	switch delta[0] {
	case deltaLoad:
		return true, nil
	case deltaAccess:
	default:
		return false, fmt.Errorf("%w: journal delta of kind %d", errMalformed, delta[0])
	}
	id, leaf := d.id(), d.uvarint()
	d.check(leaf < o.g.Leaves(), "leaf")
	present := d.byte() == 1
	var newLeaf uint64
	if present {
		newLeaf = d.uvarint()
		d.check(newLeaf < o.g.Leaves(), "leaf")
	}
	var stash []entry
	for n := d.count(); n > 0 && d.err == nil; n-- {
		e := entry{id: d.id()}
		e.val = d.bytes(s.codec.ValueSize())
		stash = append(stash, e)
	}
	d.check(len(d.buf) == 0, "trailing bytes")
	if d.err != nil {
		return false, d.err
	}
	if present {
		o.pos[id] = newLeaf
	} else {
		delete(o.pos, id)
	}
	for i := range stash {
		var ok bool
		stash[i].leaf, ok = o.pos[stash[i].id]
		if !ok {
			return false, fmt.Errorf("%w: a stashed block without a position", errMalformed)
		}
	}
	for _, b := range o.g.Path(leaf, nil) {
		r.versions[b]++
	}
	o.stash, o.stashMax = stash, max(o.stashMax, len(stash))
	return false, nil
}

// checkpoint replaces the journal by the state, once the last write-back
// is on storage.
func (s *store) checkpoint(ctx context.Context) error {
	if err := s.remote.settle(ctx); err != nil {
		return err
	}
	return s.log.Checkpoint(ctx, s.encodeState(), s.log.Last())
}

// recover rebuilds the trusted state from the journal: the last
// checkpoint, the accesses after it, and their write-backs redone; a bulk
// load cut short leaves an empty store, its tree written afresh. It ends
// with a checkpoint, so the next crash replays nothing of this one.
func (s *store) recover(ctx context.Context) error {
	rec, err := s.log.Recover(ctx)
	if err != nil {
		return fmt.Errorf("pathoram: %w", err)
	}
	if err := s.decodeState(rec.State); err != nil {
		return err
	}
	load := false
	for i, delta := range rec.Deltas {
		if load, err = s.replay(delta); err != nil {
			return fmt.Errorf("pathoram: journal record %d after the checkpoint: %w", i+1, err)
		}
	}
	if err := s.log.Redo(ctx, rec); err != nil {
		return fmt.Errorf("pathoram: %w", err)
	}
	if load {
		o := s.o
		o.pos, o.stash = map[tree.BlockID]uint64{}, nil
		if err := s.remote.writeTree(ctx, func(uint64) []tree.Block { return nil }); err != nil {
			return fmt.Errorf("pathoram: rewriting the tree of an interrupted bulk load: %w", err)
		}
	}
	return s.checkpoint(ctx)
}

// encodeState serialises the trusted state, a checkpoint's content:
// parameters, position map, stash, stash high-water mark and bucket
// versions.
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
		return fmt.Errorf("pathoram: checkpoint has an unknown format")
	}
	d.buf = d.buf[len(stateMagic):]
	o, r := s.o, s.remote
	L, z, vs := d.uvarint(), d.uvarint(), d.uvarint()
	// A mismatch of L or the value size is caught by kv's metadata record
	// (capacity, value size) before this; Z is pathoram's own.
	if d.err == nil && (L != uint64(o.g.L) || vs != uint64(s.codec.ValueSize())) {
		return fmt.Errorf("pathoram: checkpoint is of a tree of %d levels and %d-byte values; this store has %d and %d",
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

var errMalformed = errors.New("pathoram: trusted state is malformed")

func (d *decoder) check(ok bool, what string) {
	if !ok && d.err == nil {
		d.err = fmt.Errorf("%w: %s", errMalformed, what)
	}
}

func (d *decoder) byte() byte {
	d.check(len(d.buf) > 0, "byte")
	if d.err != nil {
		return 0
	}
	v := d.buf[0]
	d.buf = d.buf[1:]
	return v
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
