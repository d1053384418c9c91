package treebeard

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/oblivkv/oblivkv/internal/durable/delta"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// The binary encodings of the messages between the layers and of their
// replies, as they cross sealed (wire.go). Each body starts with
// wireVersion; the same value always encodes to the same bytes (maps in
// the order of their keys); decoding is strict: a wrong version, a
// number out of its type's range, an enumeration value the code does not
// know, a cut body and trailing bytes all fail. A nil byte string stays
// nil and an empty one empty; an empty slice or map decodes as nil.

// wireVersion is the first byte of every encoded message and reply.
// Version 2 added a request's Name and the shards' names (ShardBlocks).
const wireVersion = 2

// wireCodec encodes and decodes one type of message or reply.
type wireCodec[V any] struct {
	kind   msgKind
	append func([]byte, V) []byte
	decode func(*delta.Decoder) V
}

// encode returns v's body, its version first.
func (c wireCodec[V]) encode(v V) []byte { return c.append([]byte{wireVersion}, v) }

// parse decodes a whole body of c.append.
func (c wireCodec[V]) parse(b []byte) (V, error) {
	d := delta.NewDecoder(b)
	decodeVersion(d)
	v := c.decode(d)
	if err := d.Done(); err != nil {
		var zero V
		return zero, fmt.Errorf("treebeard: decoding a %v: %w", c.kind, err)
	}
	return v, nil
}

// decodeVersion reads wireVersion.
func decodeVersion(d *delta.Decoder) {
	if version := d.Byte(); version != wireVersion && !d.Failed() {
		d.Check(false, fmt.Sprintf("wire version %d", version))
	}
}

// The codecs of every message and reply.
var (
	accessCodec              = wireCodec[AccessMsg]{kindAccess, appendAccessMsg, decodeAccessMsg}
	accessReplyCodec         = wireCodec[AccessReply]{kindAccessReply, appendAccessReply, decodeAccessReply}
	readPathsCodec           = wireCodec[ReadPathsMsg]{kindReadPaths, appendReadPathsMsg, decodeReadPathsMsg}
	readPathsReplyCodec      = wireCodec[ReadPathsReply]{kindReadPathsReply, appendReadPathsReply, decodeReadPathsReply}
	evictionBlocksCodec      = wireCodec[EvictionBlocksMsg]{kindEvictionBlocks, appendEvictionBlocksMsg, decodeEvictionBlocksMsg}
	evictionBlocksReplyCodec = wireCodec[EvictionBlocksReply]{kindEvictionBlocksReply, appendEvictionBlocksReply, decodeEvictionBlocksReply}
	evictionDoneCodec        = wireCodec[EvictionDoneMsg]{kindEvictionDone, appendEvictionDoneMsg, decodeEvictionDoneMsg}
	evictionDoneReplyCodec   = wireCodec[EvictionDoneReply]{kindEvictionDoneReply, appendEvictionDoneReply, decodeEvictionDoneReply}
	adminCodec               = wireCodec[AdminMsg]{kindAdmin, appendAdminMsg, decodeAdminMsg}
	adminReplyCodec          = wireCodec[AdminReply]{kindAdminReply, appendAdminReply, decodeAdminReply}
)

func appendAccessMsg(b []byte, m AccessMsg) []byte {
	b = appendMsgID(b, m.ID)
	b = appendList(b, m.Batch, appendRequest)
	return appendList(b, m.Release, appendMsgID)
}

func decodeAccessMsg(d *delta.Decoder) AccessMsg {
	return AccessMsg{ID: decodeMsgID(d), Batch: decodeList(d, decodeRequest), Release: decodeList(d, decodeMsgID)}
}

func appendAccessReply(b []byte, r AccessReply) []byte {
	return appendStatus(appendList(b, r.Replies, appendReply), r.Status)
}

func decodeAccessReply(d *delta.Decoder) AccessReply {
	return AccessReply{Replies: decodeList(d, decodeReply), Status: decodeStatus(d)}
}

func appendReadPathsMsg(b []byte, m ReadPathsMsg) []byte {
	b = appendMsgID(b, m.ID)
	b = appendInt(b, m.Tree)
	b = appendList(b, m.Reads, appendPathRead)
	return appendList(b, m.Release, appendMsgID)
}

func decodeReadPathsMsg(d *delta.Decoder) ReadPathsMsg {
	return ReadPathsMsg{ID: decodeMsgID(d), Tree: decodeInt(d), Reads: decodeList(d, decodePathRead), Release: decodeList(d, decodeMsgID)}
}

func appendReadPathsReply(b []byte, r ReadPathsReply) []byte {
	return appendStatus(appendList(b, r.Results, appendReadResult), r.Status)
}

func decodeReadPathsReply(d *delta.Decoder) ReadPathsReply {
	return ReadPathsReply{Results: decodeList(d, decodeReadResult), Status: decodeStatus(d)}
}

func appendEvictionBlocksMsg(b []byte, m EvictionBlocksMsg) []byte {
	return appendList(appendMsgID(b, m.ID), m.Release, appendMsgID)
}

func decodeEvictionBlocksMsg(d *delta.Decoder) EvictionBlocksMsg {
	return EvictionBlocksMsg{ID: decodeMsgID(d), Release: decodeList(d, decodeMsgID)}
}

func appendEvictionBlocksReply(b []byte, r EvictionBlocksReply) []byte {
	return appendStatus(appendList(b, r.Blocks, appendORAMBlock), r.Status)
}

func decodeEvictionBlocksReply(d *delta.Decoder) EvictionBlocksReply {
	return EvictionBlocksReply{Blocks: decodeList(d, decodeORAMBlock), Status: decodeStatus(d)}
}

func appendEvictionDoneMsg(b []byte, m EvictionDoneMsg) []byte {
	b = appendMsgID(b, m.ID)
	b = appendList(b, m.Blocks, appendORAMBlock)
	b = appendList(b, m.Placed, binary.AppendVarint)
	return appendList(b, m.Release, appendMsgID)
}

func decodeEvictionDoneMsg(d *delta.Decoder) EvictionDoneMsg {
	return EvictionDoneMsg{ID: decodeMsgID(d), Blocks: decodeList(d, decodeORAMBlock), Placed: decodeList(d, decodeInt64),
		Release: decodeList(d, decodeMsgID)}
}

func appendEvictionDoneReply(b []byte, r EvictionDoneReply) []byte {
	return appendStatus(appendList(b, r.Stale, appendStale), r.Status)
}

func decodeEvictionDoneReply(d *delta.Decoder) EvictionDoneReply {
	return EvictionDoneReply{Stale: decodeList(d, decodeStale), Status: decodeStatus(d)}
}

func appendAdminMsg(b []byte, m AdminMsg) []byte {
	b = appendMsgID(b, m.ID)
	b = append(b, byte(m.Op))
	b = appendInt(b, m.Tree)
	b = appendShardBlocks(b, m.Blocks)
	b = appendList(b, m.Placed, func(b []byte, bucket []ringoram.Block) []byte { return appendList(b, bucket, appendORAMBlock) })
	return appendTreeSnapshot(b, m.State)
}

func decodeAdminMsg(d *delta.Decoder) AdminMsg {
	m := AdminMsg{ID: decodeMsgID(d), Op: AdminOp(decodeEnum(d, uint8(AdminNames), "an admin operation")), Tree: decodeInt(d)}
	m.Blocks = decodeShardBlocks(d)
	m.Placed = decodeList(d, func(d *delta.Decoder) []ringoram.Block { return decodeList(d, decodeORAMBlock) })
	m.State = decodeTreeSnapshot(d)
	return m
}

func appendAdminReply(b []byte, r AdminReply) []byte {
	b = appendShardBlocks(b, r.Blocks)
	b = appendTreeSnapshot(b, r.State)
	b = appendLayerStats(b, r.Stats)
	return appendStatus(b, r.Status)
}

func decodeAdminReply(d *delta.Decoder) AdminReply {
	return AdminReply{Blocks: decodeShardBlocks(d), State: decodeTreeSnapshot(d), Stats: decodeLayerStats(d), Status: decodeStatus(d)}
}

// appendList appends the number of items of l, then each.
func appendList[T any](b []byte, l []T, each func([]byte, T) []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(l)))
	for _, v := range l {
		b = each(b, v)
	}
	return b
}

// decodeList reads a list of appendList; none is nil. Every item takes a
// byte at least, so a count is never larger than the bytes left.
func decodeList[T any](d *delta.Decoder, each func(*delta.Decoder) T) []T {
	n := d.Count()
	if n == 0 {
		return nil
	}
	l := make([]T, 0, n)
	for range n {
		if d.Failed() {
			return nil
		}
		l = append(l, each(d))
	}
	return l
}

func appendEndpoint(b []byte, e Endpoint) []byte { return appendInt(append(b, byte(e.Layer)), e.Index) }

func decodeEndpoint(d *delta.Decoder) Endpoint {
	return Endpoint{Layer: Layer(decodeEnum(d, uint8(LayerStore), "a layer")), Index: decodeInt(d)}
}

func appendMsgID(b []byte, id MsgID) []byte {
	b = appendEndpoint(b, id.Sender)
	b = binary.AppendUvarint(b, id.Incarnation)
	b = binary.AppendUvarint(b, id.Epoch)
	return binary.AppendUvarint(b, id.Seq)
}

func decodeMsgID(d *delta.Decoder) MsgID {
	return MsgID{Sender: decodeEndpoint(d), Incarnation: d.Uvarint(), Epoch: d.Uvarint(), Seq: d.Uvarint()}
}

func appendRequest(b []byte, r Request) []byte {
	b = appendInt(b, r.Req.Router)
	b = binary.AppendUvarint(b, r.Req.Incarnation)
	b = binary.AppendUvarint(b, r.Req.Seq)
	b = append(b, byte(r.Op))
	b = append(b, r.ID[:]...)
	b = delta.AppendBytes(delta.AppendBool(b, r.Named), []byte(r.Name))
	b = appendValue(b, r.Value)
	b = append(b, byte(r.If))
	return delta.AppendBool(b, r.ReturnOld)
}

func decodeRequest(d *delta.Decoder) Request { return decodeRequestOf(d, true) }

// decodeUnnamedRequest reads a request as an earlier build encoded it,
// with no Name (a replicated log's replicaInput entries).
func decodeUnnamedRequest(d *delta.Decoder) Request { return decodeRequestOf(d, false) }

// decodeRequestOf reads a request, with its Name if named (this build's
// encoding).
func decodeRequestOf(d *delta.Decoder, named bool) Request {
	r := Request{Req: RequestID{Router: decodeInt(d), Incarnation: d.Uvarint(), Seq: d.Uvarint()}}
	r.Op = Op(decodeEnum(d, uint8(kv.MutAppend), "a mutation"))
	d.Read(r.ID[:])
	if named {
		r.Named, r.Name = d.Bool(), string(d.Bytes(tree.MaxNameSize))
	}
	r.Value = decodeValue(d)
	r.If = kv.Condition(decodeEnum(d, uint8(kv.IfExists), "a condition"))
	r.ReturnOld = d.Bool()
	return r
}

func appendReply(b []byte, r Reply) []byte {
	b = delta.AppendBool(b, r.Found)
	b = appendValue(b, r.Old)
	b = delta.AppendBool(b, r.Exists)
	b = delta.AppendBool(b, r.Written)
	b = appendValue(b, r.New)
	b = appendInt(b, r.Len)
	return appendStatus(b, r.Status)
}

func decodeReply(d *delta.Decoder) Reply {
	var r Reply
	r.Found, r.Old, r.Exists, r.Written, r.New, r.Len = d.Bool(), decodeValue(d), d.Bool(), d.Bool(), decodeValue(d), decodeInt(d)
	r.Status = decodeStatus(d)
	return r
}

func appendStatus(b []byte, s Status) []byte {
	return delta.AppendBytes(append(b, byte(s.Code)), []byte(s.Detail))
}

func decodeStatus(d *delta.Decoder) Status {
	return Status{Code: Code(decodeEnum(d, uint8(CodeFenced), "a status code")), Detail: string(d.Bytes(math.MaxInt))}
}

func appendPathRead(b []byte, r ringoram.PathRead) []byte {
	return delta.AppendBool(append(binary.AppendUvarint(b, r.Leaf), r.Want[:]...), r.Real)
}

func decodePathRead(d *delta.Decoder) ringoram.PathRead {
	r := ringoram.PathRead{Leaf: d.Uvarint()}
	d.Read(r.Want[:])
	r.Real = d.Bool()
	return r
}

func appendBlock(b []byte, bl tree.Block) []byte {
	return appendValue(append(b, bl.ID[:]...), bl.Value)
}

func decodeBlock(d *delta.Decoder) tree.Block {
	var bl tree.Block
	d.Read(bl.ID[:])
	bl.Value = decodeValue(d)
	return bl
}

func appendReadResult(b []byte, r ringoram.ReadResult) []byte {
	return delta.AppendBool(appendBlock(b, r.Block), r.Found)
}

func decodeReadResult(d *delta.Decoder) ringoram.ReadResult {
	return ringoram.ReadResult{Block: decodeBlock(d), Found: d.Bool()}
}

func appendORAMBlock(b []byte, bl ringoram.Block) []byte {
	return binary.AppendUvarint(appendBlock(b, bl.Block), bl.Leaf)
}

func decodeORAMBlock(d *delta.Decoder) ringoram.Block {
	return ringoram.Block{Block: decodeBlock(d), Leaf: d.Uvarint()}
}

func appendStale(b []byte, s Stale) []byte {
	return append(binary.AppendUvarint(b, s.Bucket), s.ID[:]...)
}

func decodeStale(d *delta.Decoder) Stale {
	s := Stale{Bucket: d.Uvarint()}
	d.Read(s.ID[:])
	return s
}

// appendShardBlocks appends the three maps, each in the order of its keys.
func appendShardBlocks(b []byte, s ShardBlocks) []byte {
	b = appendList(b, sortedIDs(s.Pos), func(b []byte, id tree.BlockID) []byte {
		return appendPosition(append(b, id[:]...), s.Pos[id])
	})
	b = appendList(b, sortedIDs(s.Stash), func(b []byte, id tree.BlockID) []byte {
		return appendValue(append(b, id[:]...), s.Stash[id])
	})
	return appendList(b, sortedIDs(s.Names), func(b []byte, id tree.BlockID) []byte {
		return delta.AppendBytes(append(b, id[:]...), []byte(s.Names[id]))
	})
}

// decodeShardBlocks reads the three maps; a block named twice in one fails.
func decodeShardBlocks(d *delta.Decoder) ShardBlocks {
	var s ShardBlocks
	s.Pos = decodeMap(d, decodePosition)
	s.Stash = decodeMap(d, decodeValue)
	s.Names = decodeMap(d, func(d *delta.Decoder) string { return string(d.Bytes(tree.MaxNameSize)) })
	return s
}

// decodeMap reads a map of appendShardBlocks, its keys in increasing
// order (so that one map has one encoding); an empty map is nil.
func decodeMap[V any](d *delta.Decoder, value func(*delta.Decoder) V) map[tree.BlockID]V {
	n := d.Count()
	if n == 0 {
		return nil
	}
	m := make(map[tree.BlockID]V, n)
	var last tree.BlockID
	for i := range n {
		var id tree.BlockID
		d.Read(id[:])
		d.Check(i == 0 || bytes.Compare(last[:], id[:]) < 0, "block ids in increasing order")
		if d.Failed() {
			return nil
		}
		m[id], last = value(d), id
	}
	return m
}

func appendPosition(b []byte, p Position) []byte {
	return binary.AppendUvarint(appendInt(b, p.Tree), p.Leaf)
}

func decodePosition(d *delta.Decoder) Position {
	return Position{Tree: decodeInt(d), Leaf: d.Uvarint()}
}

func appendTreeSnapshot(b []byte, s TreeSnapshot) []byte {
	t := s.Tree
	for _, n := range []int{t.L, t.Z, t.S, t.CachedLevels} {
		b = appendInt(b, n)
	}
	b = appendList(b, t.Versions, binary.AppendUvarint)
	b = binary.AppendUvarint(b, t.Evictions)
	b = appendList(b, t.Stale, func(b []byte, e ringoram.StaleEntry) []byte { return appendStale(b, Stale(e)) })
	b = appendList(b, t.Top, func(b []byte, tb ringoram.TopBucket) []byte {
		return appendList(binary.AppendUvarint(b, tb.Bucket), tb.Blocks, appendORAMBlock)
	})
	b = appendValue(b, t.Seeds)
	return binary.AppendUvarint(appendInt(b, s.Reads), s.Evictions)
}

func decodeTreeSnapshot(d *delta.Decoder) TreeSnapshot {
	var t ringoram.TreeState
	t.L, t.Z, t.S, t.CachedLevels = decodeInt(d), decodeInt(d), decodeInt(d), decodeInt(d)
	t.Versions = decodeList(d, (*delta.Decoder).Uvarint)
	t.Evictions = d.Uvarint()
	t.Stale = decodeList(d, func(d *delta.Decoder) ringoram.StaleEntry { return ringoram.StaleEntry(decodeStale(d)) })
	t.Top = decodeList(d, func(d *delta.Decoder) ringoram.TopBucket {
		return ringoram.TopBucket{Bucket: d.Uvarint(), Blocks: decodeList(d, decodeORAMBlock)}
	})
	t.Seeds = decodeValue(d)
	return TreeSnapshot{Tree: t, Reads: decodeInt(d), Evictions: d.Uvarint()}
}

func appendLayerStats(b []byte, s LayerStats) []byte {
	b = appendInt(appendInt(b, s.StashSize), s.StashMax)
	t := s.Tree
	for _, n := range []uint64{s.RealReads, s.FakeReads, s.StashHits,
		t.PathReads, t.MultiReads, t.BucketsRead, t.Reshuffles, t.Evictions, t.EvictedPaths,
		t.BucketsWritten, t.ReadRetries, t.MetaReads, t.CachedHits, t.CachedBlocks,
		s.ReadErrors, s.EvictionErrors, s.Copies} {
		b = binary.AppendUvarint(b, n)
	}
	return appendInt(b, s.Held)
}

func decodeLayerStats(d *delta.Decoder) LayerStats {
	s := LayerStats{StashSize: decodeInt(d), StashMax: decodeInt(d)}
	t := &s.Tree
	for _, n := range []*uint64{&s.RealReads, &s.FakeReads, &s.StashHits,
		&t.PathReads, &t.MultiReads, &t.BucketsRead, &t.Reshuffles, &t.Evictions, &t.EvictedPaths,
		&t.BucketsWritten, &t.ReadRetries, &t.MetaReads, &t.CachedHits, &t.CachedBlocks,
		&s.ReadErrors, &s.EvictionErrors, &s.Copies} {
		*n = d.Uvarint()
	}
	s.Held = decodeInt(d)
	return s
}

// appendValue appends a byte string that may be nil: a flag, then the
// string when there is one.
func appendValue(b, v []byte) []byte {
	b = delta.AppendBool(b, v != nil)
	if v == nil {
		return b
	}
	return delta.AppendBytes(b, v)
}

func decodeValue(d *delta.Decoder) []byte {
	if !d.Bool() {
		return nil
	}
	return d.Bytes(math.MaxInt)
}

// decodeInt64 reads a signed number of binary.AppendVarint (a zigzag
// encoding: a Uvarint of v<<1, its bits flipped when v is negative).
func decodeInt64(d *delta.Decoder) int64 {
	u := d.Uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

func appendInt(b []byte, v int) []byte { return binary.AppendVarint(b, int64(v)) }

func decodeInt(d *delta.Decoder) int {
	v := decodeInt64(d)
	d.Check(v >= math.MinInt && v <= math.MaxInt, "an int")
	return int(v)
}

// decodeEnum reads one byte of an enumeration whose last value is last.
func decodeEnum(d *delta.Decoder, last uint8, what string) uint8 {
	v := d.Byte()
	d.Check(v <= last, what)
	return v
}

// AppendBinary appends s as it crosses a network between processes:
// wireVersion, its kind, its id and both ends in the clear, then its
// sealed body.
func (s Sealed) AppendBinary(b []byte) ([]byte, error) {
	b = append(b, wireVersion, byte(s.Kind))
	b = appendMsgID(b, s.ID)
	b = appendEndpoint(appendEndpoint(b, s.From), s.To)
	return delta.AppendBytes(b, s.Body), nil
}

// MarshalBinary returns s as it crosses a network between processes
// (AppendBinary).
func (s Sealed) MarshalBinary() ([]byte, error) { return s.AppendBinary(nil) }

// UnmarshalSealed decodes a Sealed of AppendBinary, strictly: a wrong
// version, a kind the code does not know, a cut input and trailing bytes
// all fail. Whether the body opens is the receiver's to find out.
func UnmarshalSealed(b []byte) (Sealed, error) {
	d := delta.NewDecoder(b)
	decodeVersion(d)
	kind := msgKind(d.Byte())
	d.Check(kind >= kindAccess && kind <= kindAdminReply, "a message kind")
	s := Sealed{Kind: kind, ID: decodeMsgID(d), From: decodeEndpoint(d), To: decodeEndpoint(d), Body: d.Bytes(math.MaxInt)}
	if err := d.Done(); err != nil {
		return Sealed{}, fmt.Errorf("treebeard: decoding a sealed message: %w", err)
	}
	return s, nil
}
