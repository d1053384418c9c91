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
	recMutation // a request with the whole kv.Mutation
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
		b = append(b, recRead)
		b = binary.AppendUvarint(b, uint64(in.Read.Group))
		b = binary.AppendUvarint(b, in.Read.ID)
		b = binary.AppendUvarint(b, uint64(len(in.Read.Blocks)))
		for _, blk := range in.Read.Blocks {
			b = delta.AppendBool(b, blk.Real)
			if blk.Real {
				b = delta.AppendBytes(b, blk.Val)
			}
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
	case recRead:
		rd := &ReadDone{Group: int32(d.Uvarint())}
		rd.ID = d.Uvarint()
		n := d.Count()
		for i := 0; i < n && !d.Failed(); i++ {
			blk := Block{Real: d.Bool()}
			if blk.Real {
				blk.Val = d.Bytes(math.MaxInt)
			}
			rd.Blocks = append(rd.Blocks, blk)
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
