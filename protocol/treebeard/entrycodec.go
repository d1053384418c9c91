package treebeard

import (
	"encoding/binary"
	"math"

	"github.com/oblivkv/oblivkv/internal/durable/delta"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// The inputs of a Stash shard's and a tree's machines as a replicated
// group's log holds them (Replica): every field in a fixed order, each
// list its count then its items, with the codecs of the messages that
// carry the same values (wirecodec.go). gob, which the images use, would
// write its description of the types with every entry encoded alone,
// some 600 bytes more per entry, and under raft every byte of an entry
// goes to each follower.

// appendStashEntry appends e's encoding.
func appendStashEntry(b []byte, e stashEntry) []byte {
	b = append(b, byte(e.Kind))
	b = appendMsgID(b, e.Msg)
	b = binary.AppendUvarint(b, e.Epoch)
	b = appendList(b, e.Batch, appendRequest)
	b = binary.AppendVarint(b, e.Room)
	b = appendInt(b, e.Tree)
	b = appendList(b, e.Real, appendReadResult)
	b = appendStatus(b, e.Failure)
	b = appendList(b, e.IDs, appendID)
	b = appendList(b, e.Placed, binary.AppendVarint)
	b = appendList(b, e.Released, appendMsgID)
	return appendList(b, e.Taken, appendORAMBlock)
}

// decodeStashEntry reads an entry of appendStashEntry.
func decodeStashEntry(d *delta.Decoder) stashEntry { return decodeStashEntryWith(d, decodeRequest) }

// decodeEarlierStashEntry reads an entry as an earlier build wrote it:
// its requests with no Name (replicaInput).
func decodeEarlierStashEntry(d *delta.Decoder) stashEntry {
	return decodeStashEntryWith(d, decodeUnnamedRequest)
}

// decodeStashEntryWith reads an entry whose requests decodeReq reads.
func decodeStashEntryWith(d *delta.Decoder, decodeReq func(*delta.Decoder) Request) stashEntry {
	e := stashEntry{Kind: stashEntryKind(decodeEnum(d, uint8(entryTaken), "a Stash shard's entry"))}
	e.Msg = decodeMsgID(d)
	e.Epoch = d.Uvarint()
	e.Batch = decodeList(d, decodeReq)
	e.Room = decodeInt64(d)
	e.Tree = decodeInt(d)
	e.Real = decodeList(d, decodeReadResult)
	e.Failure = decodeStatus(d)
	e.IDs = decodeList(d, readID)
	e.Placed = decodeList(d, decodeInt64)
	e.Released = decodeList(d, decodeMsgID)
	e.Taken = decodeList(d, decodeORAMBlock)
	return e
}

// appendORAMEntry appends e's encoding.
func appendORAMEntry(b []byte, e oramEntry) []byte {
	b = append(b, byte(e.Kind))
	b = appendMsgID(b, e.ID)
	b = binary.AppendUvarint(b, e.Epoch)
	b = appendInt(b, e.Shard)
	b = appendList(b, e.Reads, appendPathRead)
	b = binary.AppendUvarint(b, e.Number)
	b = appendList(b, e.Blocks, appendORAMBlock)
	b = appendList(b, e.Plains, delta.AppendBytes)
	b = appendList(b, e.Reals, func(b []byte, l []tree.Block) []byte { return appendList(b, l, appendBlock) })
	b = appendList(b, e.Stale, appendStale)
	b = append(b, e.Plan.Seed[:]...)
	b = appendList(b, e.Plan.Reads, appendPathRead)
	b = appendInt(b, e.Plan.Evict)
	b = appendInt(b, e.Paths)
	b = appendList(b, e.Released, appendMsgID)
	return appendStatus(b, e.Failure)
}

// decodeORAMEntry reads an entry of appendORAMEntry.
func decodeORAMEntry(d *delta.Decoder) oramEntry {
	e := oramEntry{Kind: oramEntryKind(decodeEnum(d, uint8(oramGo), "a tree's entry"))}
	e.ID = decodeMsgID(d)
	e.Epoch = d.Uvarint()
	e.Shard = decodeInt(d)
	e.Reads = decodeList(d, decodePathRead)
	e.Number = d.Uvarint()
	e.Blocks = decodeList(d, decodeORAMBlock)
	e.Plains = decodeList(d, func(d *delta.Decoder) []byte { return d.Bytes(math.MaxInt) })
	e.Reals = decodeList(d, func(d *delta.Decoder) []tree.Block { return decodeList(d, decodeBlock) })
	e.Stale = decodeList(d, decodeStale)
	d.Read(e.Plan.Seed[:])
	e.Plan.Reads = decodeList(d, decodePathRead)
	e.Plan.Evict = decodeInt(d)
	e.Paths = decodeInt(d)
	e.Released = decodeList(d, decodeMsgID)
	e.Failure = decodeStatus(d)
	return e
}

func appendID(b []byte, id tree.BlockID) []byte { return append(b, id[:]...) }
