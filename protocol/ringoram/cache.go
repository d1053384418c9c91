package ringoram

import "github.com/oblivkv/oblivkv/protocol/tree"

// metaCache is the Tree's trusted copy of its buckets' metadata, as it
// last wrote or read and checked each: an operation reads from storage
// only the metadata of buckets it has no copy of, so once every bucket of
// a tree has been touched (Init touches them all) a multi-path read or an
// eviction is a slot Read and a Write, one round trip fewer. Each bucket's
// plaintext record is kept in one flat slice (metaPlainSize bytes a
// bucket: 112 at Z = 2), with no pointer for the collector to follow.
// Storage still receives every metadata record, so a Tree restored from
// its TreeState (recovery), which starts with no copy, reads them back.
type metaCache struct {
	size  int    // bytes a record
	plain []byte // by bucket
	known []bool // by bucket: plain holds its record
}

func newMetaCache(buckets uint64, z int) metaCache {
	size := metaPlainSize(z)
	return metaCache{size: size, plain: make([]byte, int(buckets)*size), known: make([]bool, buckets)}
}

// get fills m with bucket's record and reports whether there was one.
func (c *metaCache) get(m *meta, bucket uint64, p Params, g tree.Geometry) bool {
	if !c.known[bucket] {
		return false
	}
	// The record was checked when it was read or built: it parses.
	if err := m.parse(c.record(bucket), p, g, bucket); err != nil {
		panic("ringoram: a cached metadata record does not parse: " + err.Error())
	}
	return true
}

// put keeps m as bucket's record.
func (c *metaCache) put(bucket uint64, m *meta) {
	m.appendPlain(c.record(bucket)[:0])
	c.known[bucket] = true
}

// putPlain keeps plain, a record's plaintext, as bucket's record.
func (c *metaCache) putPlain(bucket uint64, plain []byte) {
	copy(c.record(bucket), plain)
	c.known[bucket] = true
}

// forget drops bucket's record: storage holds a newer one (recovery).
func (c *metaCache) forget(bucket uint64) { c.known[bucket] = false }

// clear drops every record.
func (c *metaCache) clear() { clear(c.known) }

func (c *metaCache) record(bucket uint64) []byte {
	return c.plain[int(bucket)*c.size : int(bucket+1)*c.size]
}
