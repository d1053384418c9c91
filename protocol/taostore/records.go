package taostore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/oblivkv/oblivkv/internal/durable/delta"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// The journal's records (internal/durable) carry one of these deltas of
// the trusted state. A write-back's record holds its version and buckets,
// not their contents: the path records hold every bucket as its flush left
// it, replay keeps them all in the subtree, and recovery writes the whole
// subtree back under a version above every journaled one, which covers
// any write-back storage lost.
const (
	deltaPath      byte = iota + 1 // a path processed: its buckets after the flush, the answered block's position, the stash
	deltaWriteBack                 // a write-back: its version and buckets
	deltaLoad                      // a bulk load begins, under a version
	deltaRead                      // a path read is about to be issued: its number, leaf and, for a real read, its block
)

// Position changes a path's record may carry.
const (
	posNone     byte = iota // no block was answered
	posSet                  // the block answered lives on at a new leaf
	posDelete               // the block answered was deleted
	posSetNamed             // posSet, then the block's key: a request stored a key whose name the state did not hold (an earlier build's records have none)
)

// readDelta describes path read number plan, planned as p.
func readDelta(plan uint64, p plannedPath) []byte {
	b := binary.AppendUvarint(binary.AppendUvarint([]byte{deltaRead}, plan), p.Leaf)
	if !p.Real {
		return append(b, 0)
	}
	return append(append(b, 1), p.ID[:]...)
}

// pathDelta describes the processing of path read number plan, to leaf,
// that answered block id (real) or no block: every node of the path as
// the flush left it, the block's position (and its name, if the
// processing kept it: named) and the whole stash (a few blocks; TaoStore
// Sec. V-C bounds it by 2K), then the plan's number.
func (s *store) pathDelta(leaf uint64, real bool, id tree.BlockID, plan uint64, named bool) []byte {
	b := binary.AppendUvarint([]byte{deltaPath}, leaf)
	switch nl, ok := s.pos[id]; {
	case !real:
		b = append(b, posNone)
	case ok && named:
		b = binary.AppendUvarint(append(append(b, posSetNamed), id[:]...), nl)
		b = delta.AppendBytes(b, []byte(s.names[id]))
	case ok:
		b = binary.AppendUvarint(append(append(b, posSet), id[:]...), nl)
	default:
		b = append(append(b, posDelete), id[:]...)
	}
	b = binary.AppendUvarint(b, uint64(len(s.stash)))
	for id, v := range s.stash {
		b = appendBlock(b, tree.Block{ID: id, Value: v})
	}
	s.nodeBuf = s.sub.pathNodes(leaf, s.nodeBuf)
	for _, n := range s.nodeBuf {
		b = binary.AppendUvarint(b, uint64(len(n.blocks)))
		for _, blk := range n.blocks {
			b = appendBlock(b, blk)
		}
	}
	return binary.AppendUvarint(b, plan)
}

// writeBackDelta describes a write-back of buckets under version.
func writeBackDelta(version uint64, buckets []uint64) []byte {
	b := binary.AppendUvarint([]byte{deltaWriteBack}, version)
	b = binary.AppendUvarint(b, uint64(len(buckets)))
	for _, bk := range buckets {
		b = binary.AppendUvarint(b, bk)
	}
	return b
}

func appendBlock(b []byte, blk tree.Block) []byte {
	return delta.AppendBytes(append(b, blk.ID[:]...), blk.Value)
}

var errMalformed = errors.New("taostore: malformed journal record")

// Apply implements durable.Machine: it applies a record's delta to the
// state. s.loadCut tells whether the record began a bulk load: if it is
// the last, no checkpoint ended the load, and the tree must be written
// afresh.
func (s *store) Apply(rec []byte) error {
	d := delta.NewDecoder(rec)
	kind := d.Byte()
	s.loadCut = kind == deltaLoad
	switch kind {
	case deltaPath:
		s.replayPath(d)
	case deltaWriteBack:
		version, buckets := s.readWriteBack(d)
		if !d.Failed() {
			s.version = max(s.version, version)
			s.acknowledge(buckets, version)
		}
	case deltaLoad:
		s.version = max(s.version, d.Uvarint())
	case deltaRead:
		s.replayRead(d)
	default:
		d.Check(d.Failed(), fmt.Sprint("a delta of kind ", kind))
	}
	if err := d.Done(); err != nil {
		return fmt.Errorf("%w: %w", errMalformed, err)
	}
	return nil
}

// readWriteBack reads a write-back's record: its version and buckets.
func (s *store) readWriteBack(d *delta.Decoder) (version uint64, buckets []uint64) {
	version = d.Uvarint()
	for n := d.Count(); n > 0 && !d.Failed(); n-- {
		b := d.Uvarint()
		d.Check(b < s.geo.Buckets(), "a bucket outside the tree")
		buckets = append(buckets, b)
	}
	return version, buckets
}

// replayPath applies a path's record.
func (s *store) replayPath(d *delta.Decoder) {
	leaf := d.Uvarint()
	d.Check(leaf < s.geo.Leaves(), "a leaf outside the tree")
	switch kind := d.Byte(); kind {
	case posSet:
		id := readID(d)
		s.pos[id] = d.Uvarint()
	case posSetNamed:
		id := readID(d)
		s.pos[id] = d.Uvarint()
		s.names[id] = string(d.Bytes(tree.MaxNameSize))
	case posDelete:
		id := readID(d)
		delete(s.pos, id)
		delete(s.names, id)
	case posNone:
	default:
		d.Check(d.Failed(), fmt.Sprint("a position change of kind ", kind))
	}
	if d.Failed() {
		return
	}
	stash := map[tree.BlockID][]byte{}
	for n := d.Count(); n > 0 && !d.Failed(); n-- {
		blk := readBlock(d, s.codec.ValueSize())
		stash[blk.ID] = blk.Value
	}
	for _, b := range s.geo.Path(leaf, nil) {
		blocks := make([]tree.Block, d.Count())
		for i := range blocks {
			blocks[i] = readBlock(d, s.codec.ValueSize())
		}
		if !d.Failed() {
			s.sub.set(b, blocks)
		}
	}
	if !d.Failed() {
		s.stash = stash
	}
	if d.More() { // records written before path reads were planned have no number
		delete(s.unfinished, d.Uvarint())
	}
}

// replayRead applies a planned path read's record.
func (s *store) replayRead(d *delta.Decoder) {
	plan, p := d.Uvarint(), plannedPath{Leaf: d.Uvarint()}
	d.Check(p.Leaf < s.geo.Leaves(), "a leaf outside the tree")
	if p.Real = d.Bool(); p.Real {
		p.ID = readID(d)
	}
	if !d.Failed() {
		s.unfinished[plan] = p
		s.nextPlan = max(s.nextPlan, plan+1)
	}
}

// readID reads a block ID.
func readID(d *delta.Decoder) (id tree.BlockID) {
	d.Read(id[:])
	return id
}

// readBlock reads a block appendBlock wrote.
func readBlock(d *delta.Decoder, valueSize int) tree.Block {
	return tree.Block{ID: readID(d), Value: d.Bytes(valueSize)}
}
