package oblivistore

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"fmt"

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

// sealMsg seals a message m from id.From to receiver to.
func sealMsg[M any](keys *seal.Keys, id MsgID, to Node, m M) (Sealed, error) {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(m); err != nil {
		return Sealed{}, fmt.Errorf("oblivistore: encoding a message: %w", err)
	}
	return Sealed{ID: id, To: to, Body: keys.Seal(nil, msgAD(id, to), buf.Bytes())}, nil
}

// openMsg opens a sealed message: its content, a fresh value sharing no
// memory with the sender's.
func openMsg[M any](keys *seal.Keys, s Sealed) (M, error) {
	var m M
	plain, err := keys.Open(nil, msgAD(s.ID, s.To), s.Body)
	if err != nil {
		return m, fmt.Errorf("oblivistore: message %+v to %d: %w", s.ID, s.To, err)
	}
	if err := gob.NewDecoder(bytes.NewReader(plain)).Decode(&m); err != nil {
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
func SealToGroup(keys *seal.Keys, m ToGroup) (Sealed, error) {
	return sealMsg(keys, m.ID, m.Group, m.Msg)
}

func OpenToGroup(keys *seal.Keys, s Sealed) (ToGroup, error) {
	m, err := openMsg[PartitionMsg](keys, s)
	return ToGroup{ID: s.ID, Group: s.To, Msg: m}, err
}

func SealToFront(keys *seal.Keys, m ToFront) (Sealed, error) {
	return sealMsg(keys, m.ID, FrontNode, m.Msg)
}

func OpenToFront(keys *seal.Keys, s Sealed) (ToFront, error) {
	if s.To != FrontNode {
		return ToFront{}, fmt.Errorf("oblivistore: message %+v is for group %d, not the Front", s.ID, s.To)
	}
	m, err := openMsg[FrontMsg](keys, s)
	return ToFront{ID: s.ID, Msg: m}, err
}
