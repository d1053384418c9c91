package ringoram

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"math/rand/v2"

	"github.com/oblivkv/oblivkv/random"
)

// treeImage is the whole of a Tree's state, an operation in progress
// included: what a machine's snapshot holds of it (Image). A TreeState
// is the part a clean restart needs; the rest is the metadata the Tree
// has copies of, its counters, the plan it resumes, the operation in
// progress and the source of that operation's choices.
type treeImage struct {
	State  TreeState
	Cached []cachedMeta // by bucket, ascending
	Stats  Stats
	Resume *Plan
	Op     *operation
	OpSrc  []byte // the operation's choices' source (a ChaCha8's state)
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
	src, err := t.opSrc.MarshalBinary()
	if err != nil {
		panic("ringoram: encoding a ChaCha8: " + err.Error()) // it cannot fail
	}
	im := treeImage{State: t.State(), Stats: t.stats, Resume: t.resume, Op: t.op, OpSrc: src}
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
	t.stats, t.resume, t.op = im.Stats, im.Resume, im.Op
	t.opSrc, t.rng = src, rand.New(src)
	return nil
}
