package slots

import "hash/maphash"

// index is the in-memory index: every address's value, laid out so the
// garbage collector has nothing to follow in it. A 2^16-key treebeard
// store has about 460,000 addresses; with an object and a key string
// each, marking them took a sixth of the CPU under load. Here entries are
// pointer-free records in one slice, found through a map from a hash of
// the address to the first record with that hash (records sharing a hash
// are chained), addresses are bytes in one shared slice, and the few
// values kept inline sit in a map of their own.
type index struct {
	hash    func(addr string) uint64
	byHash  map[uint64]uint32 // the hash of an address -> its first record + 1
	records []record
	free    []uint32          // records of deleted addresses, for reuse
	keys    []byte            // every address's bytes; a deleted one's stay until compactKeys
	garbage int               // bytes of keys no record names
	inline  map[uint32][]byte // the values kept inline, by record
	count   int
}

// record is an address's entry in the index: its value's slot, or a
// mark that the value is in inline.
type record struct {
	keyOff uint64
	keyLen uint32
	next   uint32 // the next record with the same hash + 1, 0 at the end
	used   bool
	inline bool
	at     loc
}

func newIndex() *index {
	seed := maphash.MakeSeed()
	hash := func(addr string) uint64 { return maphash.String(seed, addr) }
	return &index{hash: hash, byHash: map[uint64]uint32{}, inline: map[uint32][]byte{}}
}

func (x *index) key(r *record) string { return string(x.keys[r.keyOff : r.keyOff+uint64(r.keyLen)]) }

// find returns the position of addr's record and of the record before it
// in its chain (-1 for none), or -1 if addr has none.
func (x *index) find(addr string) (at, prev int) {
	prev = -1
	for i := int(x.byHash[x.hash(addr)]) - 1; i >= 0; i = int(x.records[i].next) - 1 {
		r := &x.records[i]
		if int(r.keyLen) == len(addr) && string(x.keys[r.keyOff:r.keyOff+uint64(r.keyLen)]) == addr {
			return i, prev
		}
		prev = i
	}
	return -1, -1
}

// get returns addr's value.
func (x *index) get(addr string) (value, bool) {
	at, _ := x.find(addr)
	if at < 0 {
		return value{}, false
	}
	return x.valueAt(uint32(at)), true
}

func (x *index) valueAt(at uint32) value {
	if r := &x.records[at]; !r.inline {
		return value{at: r.at}
	}
	return value{inline: x.inline[at]}
}

// put sets addr's value.
func (x *index) put(addr string, v value) {
	at, _ := x.find(addr)
	if at < 0 {
		at = x.add(addr)
	}
	r := &x.records[at]
	r.at, r.inline = v.at, v.inline != nil
	if r.inline {
		x.inline[uint32(at)] = v.inline
	} else {
		delete(x.inline, uint32(at))
	}
}

// add makes a record for addr, first in its hash's chain.
func (x *index) add(addr string) int {
	r := record{keyOff: uint64(len(x.keys)), keyLen: uint32(len(addr)), used: true}
	x.keys = append(x.keys, addr...)
	h := x.hash(addr)
	r.next = x.byHash[h]
	var at int
	if n := len(x.free); n > 0 {
		at, x.free = int(x.free[n-1]), x.free[:n-1]
		x.records[at] = r
	} else {
		at = len(x.records)
		x.records = append(x.records, r)
	}
	x.byHash[h] = uint32(at + 1)
	x.count++
	return at
}

// del removes addr's value, if it has one.
func (x *index) del(addr string) {
	at, prev := x.find(addr)
	if at < 0 {
		return
	}
	r := &x.records[at]
	switch {
	case prev >= 0:
		x.records[prev].next = r.next
	case r.next != 0:
		x.byHash[x.hash(addr)] = r.next
	default:
		delete(x.byHash, x.hash(addr))
	}
	x.garbage += int(r.keyLen)
	delete(x.inline, uint32(at))
	*r = record{}
	x.free = append(x.free, uint32(at))
	x.count--
	if x.garbage > 1<<20 && x.garbage > len(x.keys)/2 {
		x.compactKeys()
	}
}

// compactKeys drops the bytes of deleted addresses.
func (x *index) compactKeys() {
	keys := make([]byte, 0, len(x.keys)-x.garbage)
	for i := range x.records {
		if r := &x.records[i]; r.used {
			off := len(keys)
			keys = append(keys, x.keys[r.keyOff:r.keyOff+uint64(r.keyLen)]...)
			r.keyOff = uint64(off)
		}
	}
	x.keys, x.garbage = keys, 0
}

// each calls fn with every address and its value.
func (x *index) each(fn func(addr string, v value)) {
	for i := range x.records {
		if x.records[i].used {
			fn(x.key(&x.records[i]), x.valueAt(uint32(i)))
		}
	}
}
