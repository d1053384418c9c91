package pathoram

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/oblivkv/oblivkv/internal/durable/delta"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// stateMagic begins a checkpoint. Version 2 holds each key's name with
// its position (encodeState); a version 1 checkpoint, an earlier
// build's, has none.
const (
	stateMagic   = "oblivkv pathoram checkpoint v2\n"
	stateMagicV1 = "oblivkv pathoram checkpoint v1\n"
)

// Journal records (internal/durable) carry, besides the sealed buckets
// each access writes, one of these deltas of the trusted state.
const (
	deltaAccess byte = iota + 1 // an access: its path, its block's position, the stash after it
	deltaLoad                   // a bulk load begins: the tree is rewritten whole
	deltaRead                   // an access is about to read a path: its block and leaf
)

// journalRead describes p, the access to p.id about to read p.leaf's
// path, and the leaf it moves the block to; recorded before the read is
// issued, until the access's own record follows, recovery finishes it
// (oram.finishUnfinished). An earlier build's record has no next leaf.
func journalRead(p plannedRead) []byte {
	b := binary.AppendUvarint(append([]byte{deltaRead}, p.id[:]...), p.leaf)
	return binary.AppendUvarint(b, p.next)
}

// How an access's record holds its block's position map entry. An
// earlier build's records have no positionNamed.
const (
	positionNone  byte = iota // the block does not exist
	positionSet               // the block's new leaf
	positionNamed             // the block's new leaf, then its key: the access stored a key whose name the state did not hold
)

// journalDelta describes the access that just read leaf's path for block
// id: the position map's entry for id (its new leaf, or none), with its
// name if the access added it (named), and the whole stash after the
// flush (usually a handful of blocks).
func (o *oram) journalDelta(leaf uint64, id tree.BlockID, named bool) []byte {
	b := append([]byte{deltaAccess}, id[:]...)
	b = binary.AppendUvarint(b, leaf)
	switch nl, ok := o.pos[id]; {
	case !ok:
		b = append(b, positionNone)
	case named:
		b = binary.AppendUvarint(append(b, positionNamed), nl)
		b = delta.AppendBytes(b, []byte(o.names[id]))
	default:
		b = binary.AppendUvarint(append(b, positionSet), nl)
	}
	b = binary.AppendUvarint(b, uint64(len(o.stash)))
	for _, e := range o.stash {
		b = delta.AppendBytes(append(b, e.id[:]...), e.val)
	}
	return b
}

// Apply implements durable.Machine: it applies a journaled delta to the
// state. s.loadCut tells whether the delta began a bulk load: if it is
// the last, no checkpoint ended the load, and the tree must be written
// afresh.
func (s *store) Apply(rec []byte) error {
	o, r := s.o, s.remote
	if len(rec) == 0 {
		return fmt.Errorf("%w: empty journal delta", errMalformed)
	}
	d := delta.NewDecoder(rec[1:])
	s.loadCut = rec[0] == deltaLoad
	switch rec[0] {
	case deltaLoad:
		o.unfinished = nil
		return nil
	case deltaRead:
		p := plannedRead{id: readID(d), leaf: d.Uvarint()}
		d.Check(p.leaf < o.g.Leaves(), "leaf")
		if d.More() {
			p.next = d.Uvarint()
			d.Check(p.next < o.g.Leaves(), "leaf")
		} else { // an earlier build's record
			p.next = o.randomLeaf()
		}
		if err := d.Done(); err != nil {
			return err
		}
		o.unfinished = append(o.unfinished, p)
		return nil
	case deltaAccess:
	default:
		return fmt.Errorf("%w: journal delta of kind %d", errMalformed, rec[0])
	}
	id, leaf := readID(d), d.Uvarint()
	d.Check(leaf < o.g.Leaves(), "leaf")
	position := d.Byte()
	d.Check(position <= positionNamed, "position entry")
	var newLeaf uint64
	var name []byte
	if position != positionNone {
		newLeaf = d.Uvarint()
		d.Check(newLeaf < o.g.Leaves(), "leaf")
	}
	if position == positionNamed {
		name = d.Bytes(tree.MaxNameSize)
	}
	var stash []entry
	for n := d.Count(); n > 0 && !d.Failed(); n-- {
		e := entry{id: readID(d)}
		e.val = d.Bytes(s.codec.ValueSize())
		stash = append(stash, e)
	}
	if err := d.Done(); err != nil {
		return err
	}
	// The access's own plan is the oldest of its block and leaf: a later
	// plan of the block may read the same leaf (a next leaf drawn equal).
	if i := slices.IndexFunc(o.unfinished, func(p plannedRead) bool { return p.id == id && p.leaf == leaf }); i >= 0 {
		o.unfinished = slices.Delete(o.unfinished, i, i+1)
	}
	switch position {
	case positionNone:
		delete(o.pos, id)
		delete(o.names, id)
	case positionNamed:
		o.names[id] = string(name)
		fallthrough
	default:
		o.pos[id] = newLeaf
	}
	for i := range stash {
		var ok bool
		stash[i].leaf, ok = o.pos[stash[i].id]
		if !ok {
			return fmt.Errorf("%w: a stashed block without a position", errMalformed)
		}
	}
	for _, b := range o.g.Path(leaf, nil) {
		r.versions[b]++
	}
	o.stash, o.stashMax = stash, max(o.stashMax, len(stash))
	return nil
}

// checkpoint replaces the journal by the state, once the last write-back
// is on storage. The state does not hold the unfinished accesses: one
// whose read storage may have seen is finished first; the reads planned
// ahead are journaled again after the checkpoint, and a crash before
// their accesses write back finishes them at recovery.
func (s *store) checkpoint(ctx context.Context) error {
	o := s.o
	if err := o.finishUnfinished(ctx, func(p plannedRead) bool { return p.ahead }); err != nil {
		return err
	}
	if err := s.remote.settle(ctx); err != nil {
		return err
	}
	if err := s.log.Checkpoint(ctx, s.encodeState(), s.log.Last()); err != nil {
		return err
	}
	s.accesses = 0
	for i := range o.unfinished {
		o.unfinished[i].lsn = s.remote.planRead(o.unfinished[i])
	}
	return nil
}

// recover rebuilds the trusted state from the journal (durable.Log.Replay):
// the last checkpoint, the accesses after it, and their write-backs
// redone; a bulk load cut short leaves an empty store, its tree written
// afresh. It ends with a checkpoint, which first finishes an access cut
// short after its read was planned, so the next crash replays nothing of
// this one.
func (s *store) recover(ctx context.Context) error {
	if _, err := s.log.Replay(ctx, s); err != nil {
		return fmt.Errorf("pathoram: %w", err)
	}
	if s.opts.TestingKnobs.Leak == leakRecoveryChecksPositions {
		if err := s.checkPositions(ctx); err != nil {
			return err
		}
	}
	switch u := s.o.unfinished; {
	case s.opts.TestingKnobs.Leak == leakRecoveryForgetsReads:
		s.o.unfinished = nil
	case s.opts.TestingKnobs.Leak == leakRecoveryKeepsLastRead && len(u) > 1:
		s.o.unfinished = u[len(u)-1:]
	}
	if s.loadCut {
		o := s.o
		o.pos, o.names, o.stash = map[tree.BlockID]uint64{}, map[tree.BlockID]string{}, nil
		if err := s.remote.writeTree(ctx, func(uint64) []tree.Block { return nil }); err != nil {
			return fmt.Errorf("pathoram: rewriting the tree of an interrupted bulk load: %w", err)
		}
		s.loadCut = false
	}
	return s.checkpoint(ctx)
}

// Snapshot implements durable.Machine: the state (encodeState).
func (s *store) Snapshot() ([]byte, error) { return s.encodeState(), nil }

// encodeState serialises the trusted state, a checkpoint's content:
// parameters, position map (each block's leaf and its key's name, if the
// state holds it), stash, stash high-water mark and bucket versions.
func (s *store) encodeState() []byte {
	o, r := s.o, s.remote
	idLen := len(tree.BlockID{})
	b := make([]byte, 0, len(stateMagic)+len(o.pos)*(idLen+4)+len(r.versions)*3+64)
	b = s.appendParams(append(b, stateMagic...))
	for id, leaf := range o.pos {
		b = append(b, id[:]...)
		b = binary.AppendUvarint(b, leaf)
		name, named := o.names[id]
		if b = delta.AppendBool(b, named); named {
			b = delta.AppendBytes(b, []byte(name))
		}
	}
	return s.appendStashAndVersions(b)
}

// appendParams appends a checkpoint's parameters: the tree's levels, Z,
// the value size and the number of positions that follow.
func (s *store) appendParams(b []byte) []byte {
	for _, v := range []int{s.o.g.L, s.o.z, s.codec.ValueSize(), len(s.o.pos)} {
		b = binary.AppendUvarint(b, uint64(v))
	}
	return b
}

// appendStashAndVersions appends what a checkpoint holds after the
// positions: the stash, its high-water mark and the bucket versions.
func (s *store) appendStashAndVersions(b []byte) []byte {
	o, r := s.o, s.remote
	b = binary.AppendUvarint(b, uint64(len(o.stash)))
	for _, e := range o.stash {
		b = delta.AppendBytes(append(b, e.id[:]...), e.val)
	}
	b = binary.AppendUvarint(b, uint64(o.stashMax))
	b = binary.AppendUvarint(b, uint64(len(r.versions)))
	for _, v := range r.versions {
		b = binary.AppendUvarint(b, v)
	}
	return b
}

// Restore implements durable.Machine: it installs an encoded state after
// checking it against the store's parameters. A version 1 checkpoint
// leaves every key it holds without a name.
func (s *store) Restore(plain []byte) error {
	body, named := bytes.CutPrefix(plain, []byte(stateMagic))
	if !named && !bytes.HasPrefix(plain, []byte(stateMagicV1)) {
		return fmt.Errorf("checkpoint has an unknown format")
	}
	if !named {
		body = plain[len(stateMagicV1):]
	}
	d := delta.NewDecoder(body)
	o, r := s.o, s.remote
	L, z, vs := d.Uvarint(), d.Uvarint(), d.Uvarint()
	// A mismatch of L or the value size is caught by kv's metadata record
	// (capacity, value size) before this; Z is pathoram's own.
	if !d.Failed() && (L != uint64(o.g.L) || vs != uint64(s.codec.ValueSize())) {
		return fmt.Errorf("checkpoint is of a tree of %d levels and %d-byte values; this store has %d and %d",
			L, vs, o.g.L, s.codec.ValueSize())
	}
	if !d.Failed() && z != uint64(o.z) {
		return fmt.Errorf("%w: the store was created with Z=%d, opened with Z=%d", kv.ErrMismatch, z, o.z)
	}
	npos := d.Count()
	pos, names := make(map[tree.BlockID]uint64, npos), map[tree.BlockID]string{}
	for n := npos; n > 0 && !d.Failed(); n-- {
		id, leaf := readID(d), d.Uvarint()
		pos[id] = leaf
		d.Check(leaf < o.g.Leaves() && len(pos) <= o.capacity, "position map")
		if named && d.Bool() {
			names[id] = string(d.Bytes(tree.MaxNameSize))
		}
	}
	var stash []entry
	for n := d.Count(); n > 0 && !d.Failed(); n-- {
		id, val := readID(d), d.Bytes(s.codec.ValueSize())
		leaf, ok := pos[id]
		d.Check(ok, "stash block without a position")
		stash = append(stash, entry{id: id, leaf: leaf, val: val})
	}
	stashMax := d.Uvarint()
	d.Check(d.Uvarint() == uint64(len(r.versions)), "bucket count")
	versions := make([]uint64, len(r.versions))
	for i := range versions {
		versions[i] = d.Uvarint()
	}
	if err := d.Done(); err != nil {
		return err
	}
	o.pos, o.names, o.stash, o.stashMax, r.versions = pos, names, stash, int(stashMax), versions
	return nil
}

// StoredKeys implements kv.KeyLister from the names kept beside the
// position map, once no access runs. A key an earlier build stored has
// no name: then it names none (kv.ErrKeysUnnamed).
func (s *store) StoredKeys(context.Context) ([]string, error) {
	s.turns.exclusive()
	defer s.turns.done()
	return tree.NamedKeys(s.o.pos, s.o.names)
}

var errMalformed = errors.New("pathoram: trusted state is malformed")

// readID reads a block ID.
func readID(d *delta.Decoder) (id tree.BlockID) {
	d.Read(id[:])
	return id
}
