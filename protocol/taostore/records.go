package taostore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/oblivkv/oblivkv/protocol/tree"
)

// The journal's records (internal/durable) carry one of these deltas of
// the trusted state; a write-back's record also carries its sealed
// buckets, which recovery writes again.
const (
	deltaPath      byte = iota + 1 // a path processed: its buckets after the flush, the answered block's position, the stash
	deltaWriteBack                 // a write-back: its version and buckets
	deltaLoad                      // a bulk load begins, under a version
)

// Position changes a path's record may carry.
const (
	posNone   byte = iota // no block was answered
	posSet                // the block answered lives on at a new leaf
	posDelete             // the block answered was deleted
)

// pathDelta describes the processing of a path to leaf that answered
// block id (real) or no block: every node of the path as the flush left
// it, the block's position and the whole stash (a few blocks; TaoStore
// Sec. V-C bounds it by 2K).
func (s *store) pathDelta(leaf uint64, real bool, id tree.BlockID) []byte {
	b := binary.AppendUvarint([]byte{deltaPath}, leaf)
	switch nl, ok := s.pos[id]; {
	case !real:
		b = append(b, posNone)
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
	return b
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
	b = append(b, blk.ID[:]...)
	b = binary.AppendUvarint(b, uint64(len(blk.Value)))
	return append(b, blk.Value...)
}

var errMalformed = errors.New("malformed journal record")

// replay applies a record's delta to the state; it reports whether the
// record began a bulk load (the tree must then be written afresh).
func (s *store) replay(delta []byte) (load bool, err error) {
	r := reader{b: delta}
	switch r.byte() {
	case deltaPath:
		s.replayPath(&r)
	case deltaWriteBack:
		version := r.uvarint()
		buckets := make([]uint64, r.count())
		for i := range buckets {
			if buckets[i] = r.uvarint(); buckets[i] >= s.geo.Buckets() {
				r.err = errMalformed
			}
		}
		if r.err == nil {
			s.version = max(s.version, version)
			s.acknowledge(buckets, version)
		}
	case deltaLoad:
		s.version = max(s.version, r.uvarint())
		load = true
	default:
		r.err = errMalformed
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = errMalformed
	}
	return load, r.err
}

// replayPath applies a path's record.
func (s *store) replayPath(r *reader) {
	leaf := r.uvarint()
	if leaf >= s.geo.Leaves() {
		r.err = errMalformed
		return
	}
	switch r.byte() {
	case posSet:
		id := r.id()
		s.pos[id] = r.uvarint()
	case posDelete:
		delete(s.pos, r.id())
	case posNone:
	default:
		r.err = errMalformed
	}
	stash := map[tree.BlockID][]byte{}
	for n := r.count(); n > 0 && r.err == nil; n-- {
		blk := r.block(s.codec.ValueSize())
		stash[blk.ID] = blk.Value
	}
	for _, b := range s.geo.Path(leaf, nil) {
		blocks := make([]tree.Block, r.count())
		for i := range blocks {
			blocks[i] = r.block(s.codec.ValueSize())
		}
		if r.err == nil {
			s.sub.set(b, blocks)
		}
	}
	if r.err == nil {
		s.stash = stash
	}
}

// reader reads a delta, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		r.err = errMalformed
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errMalformed
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a count of items of at least one byte each.
func (r *reader) count() int {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.err = errMalformed
		return 0
	}
	return int(n)
}

func (r *reader) id() tree.BlockID {
	var id tree.BlockID
	if len(r.b) < len(id) {
		r.err = errMalformed
		return id
	}
	r.b = r.b[copy(id[:], r.b):]
	return id
}

func (r *reader) block(valueSize int) tree.Block {
	blk := tree.Block{ID: r.id()}
	n := r.uvarint()
	if r.err != nil || n > uint64(valueSize) || n > uint64(len(r.b)) {
		r.err = fmt.Errorf("%w: a block value", errMalformed)
		return blk
	}
	blk.Value = r.b[:n:n]
	r.b = r.b[n:]
	return blk
}
