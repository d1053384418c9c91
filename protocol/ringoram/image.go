package ringoram

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"math/rand/v2"

	"github.com/oblivkv/oblivkv/random"
)

// treeImage is the whole of a Tree's state, the operations in progress
// included: what a machine's snapshot holds of it (Image). A TreeState
// is the part a clean restart needs; the rest is the metadata the Tree
// has copies of, its counters, the plans it resumes, the operations in
// progress and the sources of their choices.
type treeImage struct {
	State   TreeState
	Cached  []cachedMeta // by bucket, ascending
	Stats   Stats
	Resume  *Plan      // an image of an earlier build: its one plan to resume
	Op      *operation // an image of an earlier build: its one operation, whose source is OpSrc
	OpSrc   []byte     // the newest operation's source (a ChaCha8's state), or Init's
	Resumes []Plan
	Ops     []*operation
	OpSrcs  [][]byte // by operation in Ops: its source
}

// cachedMeta is the Tree's copy of one bucket's metadata record.
type cachedMeta struct {
	Bucket uint64
	Plain  []byte
}

// Image returns the whole state of the Tree, mid-operation or not, as
// bytes: a Tree of the same geometry and parameters restored from them
// (RestoreImage) takes the same steps with the same inputs to the same
// outputs and the same image.
func (t *Tree) Image() []byte {
	im := treeImage{State: t.State(), Stats: t.stats, OpSrc: marshalSource(t.opSrc), Resumes: t.resume, Ops: t.ops}
	for _, op := range t.ops {
		im.OpSrcs = append(im.OpSrcs, marshalSource(op.src))
	}
	for b, known := range t.cache.known {
		if known {
			im.Cached = append(im.Cached, cachedMeta{Bucket: uint64(b), Plain: t.cache.record(uint64(b))})
		}
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(im); err != nil {
		panic("ringoram: encoding a Tree's image: " + err.Error()) // plain data: it cannot fail
	}
	return buf.Bytes()
}

func marshalSource(src *rand.ChaCha8) []byte {
	b, err := src.MarshalBinary()
	if err != nil {
		panic("ringoram: encoding a ChaCha8: " + err.Error()) // it cannot fail
	}
	return b
}

// RestoreImage replaces the whole state of the Tree by an Image of a Tree
// of the same geometry and parameters.
func (t *Tree) RestoreImage(b []byte) error {
	var im treeImage
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&im); err != nil {
		return fmt.Errorf("ringoram: a Tree's image: %w", err)
	}
	src, err := random.Restore(im.OpSrc)
	if err != nil {
		return fmt.Errorf("ringoram: a Tree's image: %w", err)
	}
	if im.Op != nil { // an image of an earlier build
		im.Ops, im.OpSrcs = []*operation{im.Op}, [][]byte{im.OpSrc}
	}
	if im.Resume != nil {
		im.Resumes = []Plan{*im.Resume}
	}
	if len(im.OpSrcs) != len(im.Ops) {
		return fmt.Errorf("ringoram: a Tree's image holds %d operations and %d sources", len(im.Ops), len(im.OpSrcs))
	}
	for i, op := range im.Ops {
		s, err := random.Restore(im.OpSrcs[i])
		if err != nil {
			return fmt.Errorf("ringoram: a Tree's image: %w", err)
		}
		op.setSource(s)
	}
	if n := len(im.Ops); n > 0 {
		src = im.Ops[n-1].src // one source, as in the Tree imaged
	}
	for _, c := range im.Cached {
		if c.Bucket >= t.g.Buckets() || len(c.Plain) != t.cache.size {
			return fmt.Errorf("ringoram: a Tree's image holds a metadata record of bucket %d outside the tree", c.Bucket)
		}
	}
	if err := t.Restore(im.State); err != nil {
		return err
	}
	for _, c := range im.Cached {
		t.cache.putPlain(c.Bucket, c.Plain)
	}
	t.stats, t.resume, t.ops = im.Stats, im.Resumes, im.Ops
	t.opSrc, t.rng = src, rand.New(src)
	return nil
}
