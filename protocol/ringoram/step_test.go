package ringoram

import (
	"bytes"
	"encoding/gob"
	"reflect"
	"testing"

	"github.com/oblivkv/oblivkv/protocol/tree"
)

// stepInputs are what storage gave one operation, opened: its metadata
// plaintexts and the real blocks of its slot Read.
type stepInputs struct {
	plains [][]byte
	reals  [][]tree.Block
}

// finish runs the steps of the operation in progress on t from where it
// is, with in, and returns its Write and t's image once it is committed.
func finish(t *testing.T, tr *Tree, in stepInputs) (Write, []byte) {
	t.Helper()
	if tr.MetaReads() != nil {
		if err := tr.LearnMetas(in.plains); err != nil {
			t.Fatal(err)
		}
	}
	w := tr.ops[0].Write
	if tr.ops[0].Phase == phaseSlots {
		var err error
		if w, err = tr.LearnSlots(in.reals); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.Commit(); err != nil {
		t.Fatal(err)
	}
	return w, tr.Image()
}

// TestImageMidOperation: a multi-path read with an eviction, run step by
// step on a tree that reads its metadata again (restarted), imaged after
// each step; a fresh Tree restored from each image and given the rest of
// the inputs makes the same Write (blocks placed, permutations, versions)
// and ends with the same image, byte for byte.
func TestImageMidOperation(t *testing.T) {
	f := newFixture(t, 5, defaults, 4)
	placed := f.load(40)
	f.restart()
	d := f.tr
	reqs := []PathRead{{Leaf: placed[0].leaf, Want: placed[0].ID, Real: true}, {Leaf: 3}}
	offered := []Block{{Block: randomBlock(f.r, f.cfg.ValueSize), Leaf: 7}}
	var images [][]byte
	if _, err := d.Start(reqs, 2, offered); err != nil {
		t.Fatal(err)
	}
	images = append(images, d.Image())
	var in stepInputs
	var err error
	if in.plains, err = d.ReadMetas(f.ctx, d.MetaReads()); err != nil || len(in.plains) == 0 {
		t.Fatalf("the restarted tree read %d metadata records: %v", len(in.plains), err)
	}
	if err := d.LearnMetas(in.plains); err != nil {
		t.Fatal(err)
	}
	images = append(images, d.Image())
	if in.reals, err = d.ReadSlots(f.ctx, d.SlotReads()); err != nil {
		t.Fatal(err)
	}
	want, err := d.LearnSlots(in.reals)
	if err != nil {
		t.Fatal(err)
	}
	if !want.Results[0].Found {
		t.Fatal("the read did not find its block")
	}
	images = append(images, d.Image())
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	final := d.Image()
	for i, im := range images {
		tr, err := NewTree(f.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.RestoreImage(im); err != nil {
			t.Fatal(err)
		}
		got, image := finish(t, tr, in)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("restored after step %d, the operation wrote otherwise", i)
		}
		if !bytes.Equal(image, final) {
			t.Errorf("restored after step %d, the final image differs", i)
		}
	}
}

// TestImageOfEarlierBuild: an image that an earlier build took with its
// one operation in progress (Op and OpSrc, no Ops) restores to a Tree
// that finishes the operation as the Tree imaged does.
func TestImageOfEarlierBuild(t *testing.T) {
	f := newFixture(t, 5, defaults, 4)
	placed := f.load(40)
	d := f.tr
	reqs := []PathRead{{Leaf: placed[0].leaf, Want: placed[0].ID, Real: true}, {Leaf: 3}}
	if _, err := d.Start(reqs, 1, nil); err != nil {
		t.Fatal(err)
	}
	var in stepInputs
	var err error
	if in.reals, err = d.ReadSlots(f.ctx, d.SlotReads()); err != nil {
		t.Fatal(err)
	}
	var im treeImage
	if err := gob.NewDecoder(bytes.NewReader(d.Image())).Decode(&im); err != nil {
		t.Fatal(err)
	}
	im.Op, im.OpSrc, im.Ops, im.OpSrcs = im.Ops[0], im.OpSrcs[0], nil, nil
	var earlier bytes.Buffer
	if err := gob.NewEncoder(&earlier).Encode(im); err != nil {
		t.Fatal(err)
	}
	want, final := finish(t, d.Tree, in)
	tr, err := NewTree(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.RestoreImage(earlier.Bytes()); err != nil {
		t.Fatal(err)
	}
	if got, image := finish(t, tr, in); !reflect.DeepEqual(got, want) || !bytes.Equal(image, final) {
		t.Fatal("restored from an earlier build's image, the operation ended otherwise")
	}
}
