package oblivistore

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/oblivkv/oblivkv/internal/durable/delta"
	"github.com/oblivkv/oblivkv/kv"
)

// The journal record of an input starts with its kind.
const (
	recRequest byte = iota + 1 // earlier builds' Get, Put or Delete: such stores are refused (ErrEarlierBuild)
	recRead
	recWrite
	recReseed
	recMutation  // a request with the whole kv.Mutation
	recReadZeros // recRead, a real block of zeros given by its length (GroupMachine.lean)
)

// How a read result gives each block: recRead's blocks, an earlier
// build's, are a flag (delta.AppendBool) that reads as blockDummy or
// blockReal, so one decoder serves both kinds.
const (
	blockDummy byte = iota
	blockReal
	blockZeros // a real block of zeros: its length (recReadZeros only)
)

// appendInput encodes in as a journal record.
func appendInput(b []byte, in Input) []byte {
	switch {
	case in.Request != nil:
		b = append(b, recMutation, byte(in.Request.Op), byte(in.Request.If))
		b = delta.AppendBool(b, in.Request.ReturnOld)
		b = delta.AppendBytes(b, []byte(in.Request.Key))
		b = delta.AppendBool(b, in.Request.Val != nil)
		b = delta.AppendBytes(b, in.Request.Val)
	case in.Read != nil:
		b = append(b, recReadZeros)
		b = binary.AppendUvarint(b, uint64(in.Read.Group))
		b = binary.AppendUvarint(b, in.Read.ID)
		b = binary.AppendUvarint(b, uint64(len(in.Read.Blocks)))
		for _, blk := range in.Read.Blocks {
			b = appendBlock(b, blk)
		}
	case in.Write != nil:
		b = append(b, recWrite)
		b = binary.AppendUvarint(b, uint64(in.Write.Group))
		b = binary.AppendUvarint(b, in.Write.ID)
	case in.Reseed != nil:
		b = append(b, recReseed)
		b = append(b, in.Reseed.Seed[:]...)
		b = binary.AppendUvarint(b, in.Reseed.Incarnation)
	}
	return b
}

// decodeInput decodes a journal record of appendInput.
func decodeInput(b []byte) (Input, error) {
	d := delta.NewDecoder(b)
	var in Input
	switch kind := d.Byte(); kind {
	case recMutation:
		r := &Request{Op: OpKind(d.Byte())}
		r.If, r.ReturnOld = kv.Condition(d.Byte()), d.Bool()
		r.Key = string(d.Bytes(math.MaxInt))
		hasVal := d.Bool()
		r.Val = d.Bytes(math.MaxInt)
		switch {
		case !hasVal:
			r.Val = nil
		case r.Val == nil:
			r.Val = []byte{}
		}
		in.Request = r
	case recRead, recReadZeros:
		rd := &ReadDone{Group: int32(d.Uvarint())}
		rd.ID = d.Uvarint()
		n := d.Count()
		for i := 0; i < n && !d.Failed(); i++ {
			rd.Blocks = append(rd.Blocks, decodeBlock(d))
		}
		in.Read = rd
	case recWrite:
		w := &WriteDone{Group: int32(d.Uvarint())}
		w.ID = d.Uvarint()
		in.Write = w
	case recReseed:
		r := &Reseed{}
		d.Read(r.Seed[:])
		r.Incarnation = d.Uvarint()
		in.Reseed = r
	default:
		d.Check(false, fmt.Sprintf("input kind %d", kind))
	}
	return in, d.Done()
}

// appendBlock encodes a block of a read's result: a real block whose
// value is all zeros as its length alone.
func appendBlock(b []byte, blk Block) []byte {
	switch {
	case !blk.Real:
		return append(b, blockDummy)
	case len(blk.Val) > 0 && zeros(blk.Val):
		return binary.AppendUvarint(append(b, blockZeros), uint64(len(blk.Val)))
	}
	return delta.AppendBytes(append(b, blockReal), blk.Val)
}

func decodeBlock(d *delta.Decoder) Block {
	switch kind := d.Byte(); kind {
	case blockDummy:
		return Block{}
	case blockReal:
		return Block{Real: true, Val: d.Bytes(math.MaxInt)}
	case blockZeros:
		n := d.Uvarint()
		d.Check(n <= maxBlock, "a block's length")
		if d.Failed() {
			return Block{}
		}
		return Block{Real: true, Val: make([]byte, n)}
	default:
		d.Check(false, fmt.Sprintf("block kind %d", kind))
		return Block{}
	}
}

// maxBlock bounds the length of a block of zeros a record gives.
const maxBlock = 1 << 30

// zeros reports whether v is all zero bytes.
func zeros(v []byte) bool {
	for _, x := range v {
		if x != 0 {
			return false
		}
	}
	return true
}
