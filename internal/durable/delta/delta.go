// Package delta writes and reads the compact binary descriptions of state
// changes ("deltas") and checkpoints that protocols put in their journal
// (internal/durable): unsigned varints, length-prefixed byte strings,
// fixed-size identifiers and flags, appended with the standard library's
// binary.AppendUvarint and these helpers, and read back by a Decoder that
// remembers the first error.
//
// It owns the framing only; what a delta means is each protocol's. It
// must never trust a length it reads: a count or a string never exceeds
// the bytes left, so a malformed delta fails cleanly instead of
// allocating what it claims.
package delta

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrMalformed reports a delta that does not decode.
var ErrMalformed = errors.New("malformed journal delta")

// AppendBytes appends v with its length (a uvarint) before it.
func AppendBytes(b, v []byte) []byte { return append(binary.AppendUvarint(b, uint64(len(v))), v...) }

// AppendBool appends f as one byte, 1 or 0.
func AppendBool(b []byte, f bool) []byte {
	if f {
		return append(b, 1)
	}
	return append(b, 0)
}

// Decoder reads a delta front to back. Once a read fails, or a Check,
// every later read returns a zero value and Err the first failure.
type Decoder struct {
	buf []byte
	err error
}

// NewDecoder returns a Decoder of b.
func NewDecoder(b []byte) *Decoder { return &Decoder{buf: b} }

// Check records a failure, "what", unless ok (or the Decoder failed
// already): for the caller's own checks of what it read.
func (d *Decoder) Check(ok bool, what string) {
	if !ok && d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrMalformed, what)
	}
}

// Err returns the first failure, or nil.
func (d *Decoder) Err() error { return d.err }

// Failed reports whether a read or a Check failed.
func (d *Decoder) Failed() bool { return d.err != nil }

// More reports whether bytes are left to read: a record may end before a
// part later versions added.
func (d *Decoder) More() bool { return d.err == nil && len(d.buf) > 0 }

// Done returns the first failure, or one for bytes left unread.
func (d *Decoder) Done() error {
	d.Check(len(d.buf) == 0, "trailing bytes")
	return d.err
}

// Byte reads one byte.
func (d *Decoder) Byte() byte {
	d.Check(len(d.buf) > 0, "truncated")
	if d.err != nil {
		return 0
	}
	v := d.buf[0]
	d.buf = d.buf[1:]
	return v
}

// Bool reads a flag written by AppendBool.
func (d *Decoder) Bool() bool {
	v := d.Byte()
	d.Check(v <= 1, "a flag")
	return v == 1
}

// Uvarint reads an unsigned varint.
func (d *Decoder) Uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	d.Check(n > 0, "a number")
	if n <= 0 {
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// Count reads a number of items that take at least one byte each, so it
// never exceeds the bytes left.
func (d *Decoder) Count() int {
	n := d.Uvarint()
	d.Check(n <= uint64(len(d.buf)), "a count")
	if d.err != nil {
		return 0
	}
	return int(n)
}

// Bytes reads a string written by AppendBytes, of at most limit bytes,
// as a copy (it may outlive the delta).
func (d *Decoder) Bytes(limit int) []byte {
	n := d.Uvarint()
	d.Check(n <= uint64(limit) && n <= uint64(len(d.buf)), "a value's length")
	if d.err != nil {
		return nil
	}
	v := append([]byte{}, d.buf[:n]...)
	d.buf = d.buf[n:]
	return v
}

// Rest reads every byte left, as a copy.
func (d *Decoder) Rest() []byte {
	if d.err != nil {
		return nil
	}
	v := append([]byte{}, d.buf...)
	d.buf = nil
	return v
}

// Read fills dst with the next len(dst) bytes (a fixed-size identifier).
func (d *Decoder) Read(dst []byte) {
	d.Check(len(d.buf) >= len(dst), "truncated")
	if d.err == nil {
		d.buf = d.buf[copy(dst, d.buf):]
	}
}
