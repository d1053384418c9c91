package slots

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// value is where an address's value is: in the index itself (inline,
// non-nil even when empty) or in a slot (at). The zero value is none.
type value struct {
	inline []byte
	at     loc
}

const (
	tagInline = 0
	tagSlot   = 1
)

// encode is the value as the index's pebble database stores it.
func (v value) encode(cs *classes) []byte {
	if v.inline != nil {
		return append([]byte{tagInline}, v.inline...)
	}
	b := []byte{tagSlot}
	b = binary.AppendUvarint(b, uint64(cs.get(v.at.class).size))
	b = binary.AppendUvarint(b, uint64(v.at.slot))
	return binary.BigEndian.AppendUint64(b, v.at.stamp)
}

var errEntry = errors.New("slots: malformed index entry")

// decodeValue parses an encoded value; class returns the class of a slot
// size, or nil if the directory has no such slot file.
func decodeValue(b []byte, class func(size int64) *class) (value, error) {
	if len(b) == 0 || b[0] > tagSlot {
		return value{}, errEntry
	}
	if b[0] == tagInline {
		return value{inline: append([]byte{}, b[1:]...)}, nil
	}
	b = b[1:]
	var fields [2]uint64
	for i := range fields {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return value{}, errEntry
		}
		fields[i], b = v, b[n:]
	}
	if fields[1] > math.MaxUint32 || len(b) != 8 {
		return value{}, errEntry
	}
	c := class(int64(fields[0]))
	if c == nil {
		return value{}, fmt.Errorf("slots: the index names a slot of %d bytes, and no file holds such slots", fields[0])
	}
	return value{at: loc{class: c.id, slot: uint32(fields[1]), stamp: binary.BigEndian.Uint64(b)}}, nil
}
