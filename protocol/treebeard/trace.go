package treebeard

import "github.com/oblivkv/oblivkv/protocol/tree"

// traceKind names what a traceEvent records.
type traceKind uint8

const (
	traceEpoch traceKind = iota // a Router forwarded an epoch
	traceRead                   // an ORAM shard did a multi-path read
	traceEvict                  // an ORAM shard evicted paths
)

// traceEvent is what the trusted layers report to tests (audits compare it
// with what storage saw through the Tap). It never leaves the process.
type traceEvent struct {
	Kind     traceKind
	Epoch    uint64   // traceEpoch: the epoch forwarded
	Requests int      // traceEpoch: how many requests it held
	Tree     int      // traceRead, traceEvict
	Leaves   []uint64 // traceRead: the paths read; traceEvict: the paths evicted
	Epochs   []uint64 // traceRead: the epoch of each path read
	// Wants is, for traceRead, the block each path read fetches: the
	// block of a real read, the zero ID for a fake one (plan).
	Wants []tree.BlockID
}
