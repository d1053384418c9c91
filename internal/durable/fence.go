package durable

import "fmt"

// A fencing token (backend.Fence) of a store's write is its incarnation
// in the high IncarnationBits bits, as a term, and an index in the low
// LSNBits: the journal position (LSN) of the record that caused the write
// where one open's writes of a machine are issued in that order, or 0
// where they run concurrently (treebeard's trees and oblivistore's
// groups): every write of a later open of the store carries a higher
// token than every write of an earlier one.
const (
	IncarnationBits = 20
	LSNBits         = 64 - IncarnationBits

	// MaxIncarnation is the most opens a store's journal allows.
	MaxIncarnation = 1<<IncarnationBits - 1
	// MaxFencedLSN is the last journal position a token can carry: 2^44
	// records, more than five years at 100,000 records a second.
	MaxFencedLSN = 1<<LSNBits - 1
)

// FenceToken returns the fencing token of a write caused by the record at
// lsn in the given incarnation of a store (Log.Incarnation). It panics on
// an incarnation above MaxIncarnation (a journal refuses to open that
// often) or an lsn above MaxFencedLSN: tokens that no longer grow would
// let an older driver's writes through.
func FenceToken(incarnation, lsn uint64) uint64 {
	if incarnation > MaxIncarnation || lsn > MaxFencedLSN {
		panic(fmt.Sprintf("durable: no fencing token for incarnation %d (at most %d), journal position %d (at most %d)",
			incarnation, uint64(MaxIncarnation), lsn, uint64(MaxFencedLSN)))
	}
	return incarnation<<LSNBits | lsn
}
