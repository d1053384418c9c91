package treebeard

import (
	"encoding/binary"
	"fmt"

	"github.com/oblivkv/oblivkv/internal/durable/delta"
)

// The store's incarnation is a number that grows by one at every open of
// the store and survives restarts: the MsgIDs and RequestIDs of one open
// carry it, so they never repeat those of an earlier open, although
// epochs, eviction numbers, request numbers and the admin sequence start
// again at each open. A fresh store's is 1, in its first checkpoint; a
// reopened store journals the next one (deltaIncarnation) before it
// issues a storage write of its own, and every checkpoint keeps the last
// (state.Incarnation). The senders read it from their netState.

// deltaIncarnation is the record of a reopening: the incarnation it runs
// as. (Its kind stands apart from the layers' deltas of records.go.)
const deltaIncarnation byte = 0x40

func incarnationDelta(incarnation uint64) []byte {
	return binary.AppendUvarint([]byte{deltaIncarnation}, incarnation)
}

// replayIncarnation takes a reopening's incarnation from its record.
func (rp *replayer) replayIncarnation(d *delta.Decoder) {
	if inc := d.Uvarint(); !d.Failed() {
		rp.s.net.incarnation.Store(inc)
	}
}

// beginIncarnation makes the store run as the incarnation after the last
// one its state or journal holds, once that is durable.
func (s *store) beginIncarnation() error {
	next := s.net.incarnation.Load() + 1
	if _, err := s.log.Commit(incarnationDelta(next)); err != nil {
		return fmt.Errorf("treebeard: journaling the store's incarnation: %w", err)
	}
	s.net.incarnation.Store(next)
	return nil
}

// firstIncarnation makes a fresh store run as incarnation 1, which its
// first checkpoint keeps.
func (s *store) firstIncarnation() { s.net.incarnation.Store(1) }
