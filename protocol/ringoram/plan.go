package ringoram

import (
	"context"
	"errors"

	"github.com/oblivkv/oblivkv/random"
)

// Plan is what an operation will read, handed to Config.ReadAhead before
// its first slot Read, so that an operation a crash cut short can be
// issued again identically after recovery (Resume): Treebeard Sec. 5.3.3
// records the offsets a read chose before issuing it, since a Read that
// reached storage spent its slots, and an operation choosing again would
// read a wanted block's slot a second time beside fresh dummies. Seed
// draws every random choice of the operation, so the same state and the
// same Reads (a multi-path read) or Evict (an eviction of that many
// paths) read exactly the same slots.
type Plan struct {
	Seed  [32]byte
	Reads []PathRead // a multi-path read's requests; nil for an eviction
	Evict int        // an eviction's paths; 0 for a multi-path read
}

// ReadAhead is called with each multi-path read's and eviction's Plan
// before it reads any slot; an error fails the operation before it does.
type ReadAhead func(ctx context.Context, p Plan) error

// errNotResumed is the failure of an operation other than the one Resume
// was given: the one a crash cut short must come first.
var errNotResumed = errors.New("ringoram: the operation after Resume is not the one cut short")

// Resume makes the Tree's next operation that has no plan to resume yet
// reuse p, the plan of an operation a crash cut short after it was
// recorded: called with the same Reads (or Evict) on the same state, it
// issues the same Reads of storage. Several plans are resumed in the
// order Resume was given them, which must be the order they started in.
func (t *Tree) Resume(p Plan) { t.resume = append(t.resume, p) }

// Planned advances the Plan seed source past p's seed when p is the plan
// the Tree would draw next: replaying recorded Plans in order from a
// restored state brings the source to where the Tree that recorded them
// left it. A Plan recorded again (an operation resumed) leaves it alone.
func (t *Tree) Planned(p Plan) {
	next := *t.seeds
	if random.Draw(&next) == p.Seed {
		*t.seeds = next
	}
}
