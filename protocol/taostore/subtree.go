package taostore

import (
	"slices"

	"github.com/oblivkv/oblivkv/protocol/tree"
)

// node is one bucket held by the proxy, fresher than the storage's copy.
type node struct {
	blocks []tree.Block
	ts     uint64 // clock value of the last update (Sec. IV-B step 2)
	cached bool   // a top-level bucket that never leaves the proxy (Sec. IV-D)
}

// subtree is the proxy's local part of the tree (Sec. IV-B step 2): the
// union of the paths read and not yet written back, with the timestamps and
// the multiset of outstanding path requests that decide which nodes a
// finished write-back may drop. It is guarded by the store's lock.
type subtree struct {
	geo       tree.Geometry
	nodes     map[uint64]*node
	requested map[uint64]int // bucket -> outstanding path requests covering it
	clock     uint64
	max       int // high-water mark of len(nodes)
	path      []uint64
}

func newSubtree(geo tree.Geometry, cachedLevels int) *subtree {
	s := &subtree{geo: geo, nodes: map[uint64]*node{}, requested: map[uint64]int{}}
	for b := uint64(0); b < geo.Buckets() && geo.Level(b) < cachedLevels; b++ {
		s.nodes[b] = &node{cached: true}
	}
	return s
}

// request records a path read about to be sent (PathReqMultiSet insert).
func (s *subtree) request(leaf uint64) {
	s.path = s.geo.Path(leaf, s.path)
	for _, b := range s.path {
		s.requested[b]++
	}
}

// returned records that a path read came back (PathReqMultiSet remove).
func (s *subtree) returned(leaf uint64) {
	s.path = s.geo.Path(leaf, s.path)
	for _, b := range s.path {
		if s.requested[b]--; s.requested[b] == 0 {
			delete(s.requested, b)
		}
	}
}

// sync inserts the buckets of a path read from storage, except those the
// subtree already holds: under the fresh-subtree invariant the local copy
// is the newer one. fetched[i] is the bucket at level first+i.
func (s *subtree) sync(leaf uint64, first int, fetched [][]tree.Block) {
	for i, blocks := range fetched {
		b := s.geo.BucketAt(leaf, first+i)
		if _, ok := s.nodes[b]; !ok {
			s.nodes[b] = &node{blocks: blocks}
		}
	}
	s.max = max(s.max, len(s.nodes))
}

// set makes bucket b's contents blocks (recovery), keeping a cached
// bucket cached.
func (s *subtree) set(b uint64, blocks []tree.Block) {
	if n, ok := s.nodes[b]; ok {
		n.blocks = blocks
		return
	}
	s.nodes[b] = &node{blocks: blocks}
	s.max = max(s.max, len(s.nodes))
}

// pathNodes returns the nodes of leaf's path, root first. Every node of
// the path must be present (the path was synced, or is cached).
func (s *subtree) pathNodes(leaf uint64, dst []*node) []*node {
	dst = dst[:0]
	s.path = s.geo.Path(leaf, s.path)
	for _, b := range s.path {
		dst = append(dst, s.nodes[b])
	}
	return dst
}

// touch stamps nodes as updated now.
func (s *subtree) touch(nodes []*node) {
	s.clock++
	for _, n := range nodes {
		n.ts = s.clock
	}
}

// snapshot copies the blocks of the given buckets for a write-back that
// starts now; it returns the copies and the start time.
func (s *subtree) snapshot(buckets []uint64) ([][]tree.Block, uint64) {
	out := make([][]tree.Block, len(buckets))
	for i, b := range buckets {
		out[i] = slices.Clone(s.nodes[b].blocks)
	}
	return out, s.clock
}

// release drops, after a write-back that started at time start completed,
// the nodes among buckets that were neither updated nor requested since.
func (s *subtree) release(buckets []uint64, start uint64) {
	for _, b := range buckets {
		n, ok := s.nodes[b]
		if ok && !n.cached && n.ts <= start && s.requested[b] == 0 {
			delete(s.nodes, b)
		}
	}
}

// stored lists the buckets of the subtree that live on storage.
func (s *subtree) stored() []uint64 {
	var out []uint64
	for b, n := range s.nodes {
		if !n.cached {
			out = append(out, b)
		}
	}
	slices.Sort(out)
	return out
}
