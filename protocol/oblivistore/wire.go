package oblivistore

import (
	"encoding/binary"
	"fmt"

	"github.com/oblivkv/oblivkv/internal/durable/delta"
	"github.com/oblivkv/oblivkv/seal"
)

// Sealed is a message between the Front and a partition group as it
// crosses between processes: its id and receiver in the clear (the
// transport needs them), its content (keys, values, partitions) sealed
// under the store key and bound to both, so the network sees no more
// than that a message went from one machine to another, and a message
// replayed to another receiver or under another id fails to open.
type Sealed struct {
	ID   MsgID
	To   Node
	Body []byte
}

// sealMsg seals a message body from id.From to receiver to.
func sealMsg(keys *seal.Keys, id MsgID, to Node, body []byte) Sealed {
	return Sealed{ID: id, To: to, Body: keys.Seal(nil, msgAD(id, to), body)}
}

// openMsg opens a sealed message's body and decodes it: a fresh value,
// sharing no memory with the sender's.
func openMsg[M any](keys *seal.Keys, s Sealed, decode func(*delta.Decoder) M) (M, error) {
	var m M
	plain, err := keys.Open(nil, msgAD(s.ID, s.To), s.Body)
	if err != nil {
		return m, fmt.Errorf("oblivistore: message %+v to %d: %w", s.ID, s.To, err)
	}
	d := delta.NewDecoder(plain)
	m = decode(d)
	if err := d.Done(); err != nil {
		return m, fmt.Errorf("oblivistore: decoding message %+v: %w", s.ID, err)
	}
	return m, nil
}

// msgAD is a message's associated data: a label, its id and receiver.
func msgAD(id MsgID, to Node) []byte {
	b := append([]byte(nil), "oblivistore/msg"...)
	b = binary.BigEndian.AppendUint32(b, uint32(id.From))
	b = binary.BigEndian.AppendUint64(b, id.Incarnation)
	b = binary.BigEndian.AppendUint64(b, id.Seq)
	return binary.BigEndian.AppendUint32(b, uint32(to))
}

// SealToGroup and OpenToGroup carry a message to a partition group;
// SealToFront and OpenToFront one to the Front.
// The sealed body is the acknowledgement, then the message.
func SealToGroup(keys *seal.Keys, m ToGroup) (Sealed, error) {
	return sealMsg(keys, m.ID, m.Group, appendPartitionMsg(binary.AppendUvarint(nil, m.Ack), m.Msg)), nil
}

func OpenToGroup(keys *seal.Keys, s Sealed) (ToGroup, error) {
	if s.To == FrontNode {
		return ToGroup{}, fmt.Errorf("oblivistore: message %+v is for the Front, not a group", s.ID)
	}
	return openMsg(keys, s, func(d *delta.Decoder) ToGroup {
		return ToGroup{ID: s.ID, Group: s.To, Ack: d.Uvarint(), Msg: decodePartitionMsg(d)}
	})
}

func SealToFront(keys *seal.Keys, m ToFront) (Sealed, error) {
	return sealMsg(keys, m.ID, FrontNode, appendFrontMsg(binary.AppendUvarint(nil, m.Ack), m.Msg)), nil
}

func OpenToFront(keys *seal.Keys, s Sealed) (ToFront, error) {
	if s.To != FrontNode {
		return ToFront{}, fmt.Errorf("oblivistore: message %+v is for group %d, not the Front", s.ID, s.To)
	}
	return openMsg(keys, s, func(d *delta.Decoder) ToFront {
		return ToFront{ID: s.ID, Ack: d.Uvarint(), Msg: decodeFrontMsg(d)}
	})
}
