package slots

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// value is where an address's value is: in the index itself (inline,
// non-nil even when empty) or in a slot (at). The zero value is no value.
type value struct {
	inline []byte
	at     loc
}

func (v value) exists() bool { return v.inline != nil || v.at.valid() }

// entry is what the index holds for an address: its current value and,
// until the write that put it there is synced, its base: the address's
// last synced value, which an unclean open falls back to when the crash
// tore cur's slot (no base: the address had no synced value). epoch is
// the sync epoch of the write.
type entry struct {
	cur   value
	base  value
	epoch uint64
}

const (
	tagInline = 0
	tagSlot   = 1
)

// encode is the entry as the index's pebble database stores it: cur, then
// base if there is one and cur is in a slot (an inline cur is as durable
// as the entry itself).
func (e entry) encode(cs *classes) []byte {
	out := appendValue(nil, cs, e.cur)
	if e.base.exists() && e.cur.inline == nil {
		out = appendValue(out, cs, e.base)
	}
	return out
}

func appendValue(b []byte, cs *classes, v value) []byte {
	if v.inline != nil {
		b = append(b, tagInline)
		b = binary.AppendUvarint(b, uint64(len(v.inline)))
		return append(b, v.inline...)
	}
	b = append(b, tagSlot)
	b = binary.AppendUvarint(b, uint64(cs.get(v.at.class).size))
	b = binary.AppendUvarint(b, uint64(v.at.slot))
	return binary.BigEndian.AppendUint64(b, v.at.stamp)
}

var errEntry = errors.New("slots: malformed index entry")

// decodeEntry parses an encoded entry; class returns the class of a slot
// size, or nil if the directory has no such slot file.
func decodeEntry(b []byte, class func(size int64) *class) (entry, error) {
	var e entry
	rest, err := decodeValue(b, class, &e.cur)
	if err == nil && len(rest) > 0 {
		rest, err = decodeValue(rest, class, &e.base)
	}
	if err == nil && len(rest) > 0 {
		err = errEntry
	}
	return e, err
}

func decodeValue(b []byte, class func(int64) *class, v *value) ([]byte, error) {
	if len(b) == 0 || b[0] > tagSlot {
		return nil, errEntry
	}
	tag := b[0]
	fields, b, err := uvarints(b[1:], map[byte]int{tagInline: 1, tagSlot: 2}[tag])
	if err != nil {
		return nil, err
	}
	if tag == tagInline {
		if fields[0] > uint64(len(b)) {
			return nil, errEntry
		}
		v.inline = append([]byte{}, b[:fields[0]]...)
		return b[fields[0]:], nil
	}
	size, slot := int64(fields[0]), fields[1]
	if slot > math.MaxUint32 || len(b) < 8 {
		return nil, errEntry
	}
	c := class(size)
	if c == nil {
		return nil, fmt.Errorf("slots: the index names a slot of %d bytes, and no file holds such slots", size)
	}
	v.at = loc{class: c.id, slot: uint32(slot), stamp: binary.BigEndian.Uint64(b)}
	return b[8:], nil
}

// uvarints reads n uvarints from b.
func uvarints(b []byte, n int) ([]uint64, []byte, error) {
	out := make([]uint64, n)
	for i := range out {
		v, k := binary.Uvarint(b)
		if k <= 0 {
			return nil, nil, errEntry
		}
		out[i], b = v, b[k:]
	}
	return out, b, nil
}
