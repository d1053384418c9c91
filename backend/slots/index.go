package slots

import "hash/maphash"

// index is the in-memory index: where every address's value is, laid out
// so the garbage collector has nothing to follow in it. A 2^16-key
// treebeard store has about 460,000 addresses; with an object and a key
// string each, marking them took a sixth of the CPU under load. Here
// records are pointer-free values in one slice, found through a map from
// a hash of the address to the first record with that hash (records
// sharing a hash are chained), and addresses are bytes in one shared
// slice. A deleted address keeps its record, which names its tombstone.
type index struct {
	hash    func(addr string) uint64
	byHash  map[uint64]uint32 // the hash of an address -> its first record + 1
	records []record
	keys    []byte // every address's bytes
}

// record is an address's entry in the index.
type record struct {
	keyOff uint64
	keyLen uint32
	next   uint32 // the next record with the same hash + 1, 0 at the end
	entry
}

// entry is where an address's value is, or its tombstone.
type entry struct {
	at   loc
	tomb bool
}

func newIndex() *index {
	seed := maphash.MakeSeed()
	hash := func(addr string) uint64 { return maphash.String(seed, addr) }
	return &index{hash: hash, byHash: map[uint64]uint32{}}
}

// find returns the position of addr's record, -1 if it has none.
func (x *index) find(addr string) int {
	for i := int(x.byHash[x.hash(addr)]) - 1; i >= 0; i = int(x.records[i].next) - 1 {
		r := &x.records[i]
		if int(r.keyLen) == len(addr) && string(x.keys[r.keyOff:r.keyOff+uint64(r.keyLen)]) == addr {
			return i
		}
	}
	return -1
}

// get returns addr's entry.
func (x *index) get(addr string) (entry, bool) {
	if i := x.find(addr); i >= 0 {
		return x.records[i].entry, true
	}
	return entry{}, false
}

// put sets addr's entry and returns the one it replaced.
func (x *index) put(addr string, e entry) (old entry, had bool) {
	i := x.find(addr)
	if i < 0 {
		i = x.add(addr)
	} else {
		old, had = x.records[i].entry, true
	}
	x.records[i].entry = e
	return old, had
}

// add makes a record for addr, first in its hash's chain.
func (x *index) add(addr string) int {
	r := record{keyOff: uint64(len(x.keys)), keyLen: uint32(len(addr))}
	x.keys = append(x.keys, addr...)
	h := x.hash(addr)
	r.next = x.byHash[h]
	x.records = append(x.records, r)
	x.byHash[h] = uint32(len(x.records))
	return len(x.records) - 1
}

// each calls fn with every address (bytes of the index's own, valid
// during the call) and its entry.
func (x *index) each(fn func(addr []byte, e entry)) {
	for i := range x.records {
		r := &x.records[i]
		fn(x.keys[r.keyOff:r.keyOff+uint64(r.keyLen)], r.entry)
	}
}
