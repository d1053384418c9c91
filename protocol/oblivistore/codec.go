package oblivistore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/oblivkv/oblivkv/internal/durable/delta"
)

// The compact encodings of the messages between the Front and the
// partition groups (sealed, they cross between processes: wire.go) and
// of each machine's log entries: a message entry is its kind and its
// envelope, any other entry the journal record of its input (input.go).

// Message kinds, first byte of a message's body; msgNone, an
// acknowledgement's, has no content.
const (
	msgNone byte = iota
	msgRead
	msgEvict
	msgBlocks
	msgProgress
	msgStarted
	msgFinished
	msgReady
	msgFetch
	msgReadBlind // msgRead and Blind; msgRead is an earlier build's
)

// appendPartitionMsg encodes a message to a partition group.
func appendPartitionMsg(b []byte, m PartitionMsg) []byte {
	switch {
	case m.Read != nil:
		b = append(b, msgReadBlind)
		b = binary.AppendUvarint(b, m.Read.Seq)
		b = binary.AppendUvarint(b, uint64(m.Read.P))
		b = delta.AppendBytes(b, []byte(m.Read.Key))
		b = delta.AppendBool(b, m.Read.Has)
		b = delta.AppendBool(b, m.Read.Blind)
	case m.Evict != nil:
		b = append(b, msgEvict)
		b = binary.AppendUvarint(b, uint64(m.Evict.P))
	case m.Blocks != nil:
		b = append(b, msgBlocks)
		b = binary.AppendUvarint(b, uint64(m.Blocks.P))
		b = binary.AppendUvarint(b, uint64(len(m.Blocks.Entries)))
		for _, e := range m.Blocks.Entries {
			b = delta.AppendBytes(b, []byte(e.Key))
			b = appendVal(b, e.Val)
		}
	case m.Progress != nil:
		b = append(b, msgProgress)
		b = delta.AppendBool(b, m.Progress.Bypass)
	default:
		b = append(b, msgNone)
	}
	return b
}

// decodePartitionMsg decodes a message of appendPartitionMsg.
func decodePartitionMsg(d *delta.Decoder) PartitionMsg {
	var m PartitionMsg
	switch kind := d.Byte(); kind {
	case msgRead, msgReadBlind:
		r := &PartitionRead{Seq: d.Uvarint(), P: int32(d.Uvarint())}
		r.Key, r.Has = string(d.Bytes(math.MaxInt)), d.Bool()
		r.Blind = kind == msgReadBlind && d.Bool()
		m.Read = r
	case msgEvict:
		m.Evict = &Evict{P: int32(d.Uvarint())}
	case msgBlocks:
		bl := &Blocks{P: int32(d.Uvarint())}
		n := d.Count()
		for i := 0; i < n && !d.Failed(); i++ {
			key := string(d.Bytes(math.MaxInt))
			bl.Entries = append(bl.Entries, Entry{Key: key, Val: decodeVal(d)})
		}
		m.Blocks = bl
	case msgProgress:
		m.Progress = &Progress{Bypass: d.Bool()}
	case msgNone:
	default:
		d.Check(false, fmt.Sprintf("partition message kind %d", kind))
	}
	return m
}

// appendFrontMsg encodes a message to the Front.
func appendFrontMsg(b []byte, m FrontMsg) []byte {
	switch {
	case m.Started != nil:
		b = append(b, msgStarted)
		b = binary.AppendUvarint(b, m.Started.Seq)
		b = binary.AppendUvarint(b, uint64(m.Started.NonEarly))
	case m.Finished != nil:
		b = append(b, msgFinished)
		b = binary.AppendUvarint(b, m.Finished.Seq)
		b = delta.AppendBool(b, m.Finished.Found)
		b = appendVal(b, m.Finished.Val)
	case m.Ready != nil:
		b = append(b, msgReady)
		b = binary.AppendUvarint(b, m.Ready.Seq)
		b = appendVal(b, m.Ready.Val)
	case m.Fetch != nil:
		b = append(b, msgFetch)
		b = binary.AppendUvarint(b, uint64(m.Fetch.P))
		b = binary.AppendUvarint(b, uint64(m.Fetch.J))
		b = binary.AppendUvarint(b, uint64(m.Fetch.Early))
	default:
		b = append(b, msgNone)
	}
	return b
}

// decodeFrontMsg decodes a message of appendFrontMsg.
func decodeFrontMsg(d *delta.Decoder) FrontMsg {
	var m FrontMsg
	switch kind := d.Byte(); kind {
	case msgStarted:
		m.Started = &ReadStarted{Seq: d.Uvarint(), NonEarly: int64(d.Uvarint())}
	case msgFinished:
		f := &ReadFinished{Seq: d.Uvarint(), Found: d.Bool()}
		f.Val = decodeVal(d)
		m.Finished = f
	case msgReady:
		r := &BlockReady{Seq: d.Uvarint()}
		r.Val = decodeVal(d)
		m.Ready = r
	case msgFetch:
		m.Fetch = &Fetch{P: int32(d.Uvarint()), J: int64(d.Uvarint()), Early: int64(d.Uvarint())}
	case msgNone:
	default:
		d.Check(false, fmt.Sprintf("front message kind %d", kind))
	}
	return m
}

// appendVal encodes a value, telling nil from empty.
func appendVal(b, v []byte) []byte {
	return delta.AppendBytes(delta.AppendBool(b, v != nil), v)
}

func decodeVal(d *delta.Decoder) []byte {
	has, v := d.Bool(), d.Bytes(math.MaxInt)
	switch {
	case !has:
		return nil
	case v == nil:
		return []byte{}
	}
	return v
}

func appendMsgID(b []byte, id MsgID) []byte {
	b = binary.AppendUvarint(b, uint64(uint32(id.From)))
	b = binary.AppendUvarint(b, id.Incarnation)
	return binary.AppendUvarint(b, id.Seq)
}

func decodeMsgID(d *delta.Decoder) MsgID {
	return MsgID{From: Node(int32(uint32(d.Uvarint()))), Incarnation: d.Uvarint(), Seq: d.Uvarint()}
}

// Log entry kinds beyond the journal's input kinds (input.go).
const (
	recToFront byte = 16 + iota
	recToGroup
	recIdentified // a request with its ID, then its journal record
	recResend
	recEntries   // several entries of one machine (appendEntries)
	recFromFront // a message from the Front to a group: recToGroup without the sender, always the Front
)

// appendEntries encodes entries one machine applied, in a step or in
// successive steps (machineLogs.append), as one record of its log: the
// entry itself when it is alone, else recEntries, then each entry's
// length (uvarint) and bytes.
func appendEntries(b []byte, entries [][]byte) []byte {
	if len(entries) == 1 {
		return append(b, entries[0]...)
	}
	b = append(b, recEntries)
	for _, e := range entries {
		b = delta.AppendBytes(b, e)
	}
	return b
}

// splitEntries returns the entries of a record of appendEntries.
func splitEntries(record []byte) ([][]byte, error) {
	if len(record) == 0 || record[0] != recEntries {
		return [][]byte{record}, nil
	}
	d := delta.NewDecoder(record[1:])
	var out [][]byte
	for d.More() {
		out = append(out, d.Bytes(math.MaxInt))
	}
	return out, d.Done()
}

var errEntryKind = errors.New("oblivistore: an entry of another machine's log")

// AppendFrontEntry encodes one entry of the Front's log.
func AppendFrontEntry(b []byte, e FrontEntry) []byte {
	switch {
	case e.Request != nil:
		b = binary.AppendUvarint(append(b, recIdentified), e.Request.ID)
		return appendInput(b, Input{Request: e.Request})
	case e.Resend != nil:
		return append(b, recResend)
	case e.Msg == nil:
		return appendInput(b, Input{Reseed: e.Reseed})
	}
	b = binary.AppendUvarint(appendMsgID(append(b, recToFront), e.Msg.ID), e.Msg.Ack)
	return appendFrontMsg(b, e.Msg.Msg)
}

// DecodeFrontEntry decodes an entry of AppendFrontEntry.
func DecodeFrontEntry(b []byte) (FrontEntry, error) {
	var id uint64
	switch {
	case len(b) == 1 && b[0] == recResend:
		return FrontEntry{Resend: &Resend{}}, nil
	case len(b) > 0 && b[0] == recToFront:
		d := delta.NewDecoder(b[1:])
		m := &ToFront{ID: decodeMsgID(d), Ack: d.Uvarint()}
		m.Msg = decodeFrontMsg(d)
		return FrontEntry{Msg: m}, d.Done()
	case len(b) > 0 && b[0] == recIdentified:
		n := 0
		id, n = binary.Uvarint(b[1:])
		if n <= 0 {
			return FrontEntry{}, errors.New("oblivistore: malformed request id")
		}
		b = b[1+n:]
	}
	in, err := decodeInput(b)
	if in.Request != nil {
		in.Request.ID = id
	}
	if err == nil && (in.Read != nil || in.Write != nil) {
		err = errEntryKind
	}
	return FrontEntry{Request: in.Request, Reseed: in.Reseed}, err
}

// AppendGroupEntry encodes one entry of a partition group's log.
func AppendGroupEntry(b []byte, e GroupEntry) []byte {
	switch {
	case e.Resend != nil:
		return append(b, recResend)
	case e.Msg == nil:
		return appendInput(b, Input{Read: e.Read, Write: e.Write, Reseed: e.Reseed})
	}
	b = binary.AppendUvarint(append(b, recFromFront), e.Msg.ID.Incarnation)
	b = binary.AppendUvarint(b, e.Msg.ID.Seq)
	b = binary.AppendUvarint(binary.AppendUvarint(b, uint64(e.Msg.Group)), e.Msg.Ack)
	return appendPartitionMsg(b, e.Msg.Msg)
}

// DecodeGroupEntry decodes an entry of AppendGroupEntry.
func DecodeGroupEntry(b []byte) (GroupEntry, error) {
	switch {
	case len(b) == 1 && b[0] == recResend:
		return GroupEntry{Resend: &Resend{}}, nil
	case len(b) > 0 && (b[0] == recFromFront || b[0] == recToGroup): // recToGroup: an earlier build's
		d := delta.NewDecoder(b[1:])
		id := MsgID{From: FrontNode}
		if b[0] == recToGroup {
			id = decodeMsgID(d)
		} else {
			id.Incarnation, id.Seq = d.Uvarint(), d.Uvarint()
		}
		m := &ToGroup{ID: id, Group: Node(d.Uvarint()), Ack: d.Uvarint()}
		m.Msg = decodePartitionMsg(d)
		return GroupEntry{Msg: m}, d.Done()
	}
	in, err := decodeInput(b)
	if err == nil && in.Request != nil {
		err = errEntryKind
	}
	return GroupEntry{Read: in.Read, Write: in.Write, Reseed: in.Reseed}, err
}
