package treebeard

import (
	"errors"
	"fmt"
	"sync"

	"github.com/oblivkv/oblivkv/internal/durable/delta"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// A Stash shard or a tree as a replicated group applies it (Treebeard
// Sec. 7.2: each Stash and ORAM shard is a group of replicas): a Replica
// is the machine behind cluster/raftgroup.Machine. Its entries are the
// machine's inputs, each encoded whole (a Router's batch of an epoch, a
// tree's results of a part, what one storage Read brought;
// entrycodec.go), never one per block; its snapshot is the machine's
// image. Every replica applies the same committed entries to the same
// image and so reaches the same state and returns the same outputs,
// which only the leader's driver acts on.
//
// A group's first entry creates its machine (Replica.Create): it carries
// the machine's initial image, random sources included, drawn once by
// the replica that creates the group, so that every replica holds the
// same seeds. Any other entry before it is refused.

// Shape is what every machine of one store is built from: its options,
// with their defaults, and its capacity and value size.
type Shape struct {
	opts      Options
	geo       tree.Geometry
	capacity  int64
	valueSize int
}

// NewShape returns the shape of a store of capacity keys of valueSize
// bytes under o, checked as opening a store checks it.
func NewShape(capacity, valueSize int, o Options) (Shape, error) {
	var err error
	if o.TestingKnobs.Leak, err = envLeak(o.TestingKnobs.Leak); err != nil { // a leak only in oblivkv_leaks builds (leak.go)
		return Shape{}, err
	}
	o = o.EnsureDefaults(capacity)
	if err := o.Validate(capacity); err != nil {
		return Shape{}, err
	}
	return shapeOf(capacity, valueSize, o), nil
}

// shapeOf is the shape of a store of capacity keys of valueSize bytes
// under o, whose defaults are set.
func shapeOf(capacity, valueSize int, o Options) Shape {
	return Shape{opts: o, geo: geometry(capacity, o.Trees, o.Z), capacity: int64(capacity), valueSize: valueSize}
}

// Trees is the number of the store's trees.
func (sh Shape) Trees() int { return sh.opts.Trees }

// newStashCore returns an empty Stash shard of the store, drawing from
// seed.
func (sh Shape) newStashCore(seed [32]byte) *stashCore {
	c := newStashCore(sh.opts.Trees, sh.geo, sh.capacity, sh.valueSize, seed)
	c.leak = sh.opts.TestingKnobs.Leak
	return c
}

// newTreeCore returns the schedule of a tree of the store that has
// evicted nothing yet.
func (sh Shape) newTreeCore() *treeCore {
	c := newTreeCore(sh.opts.StashShards, sh.opts.A, sh.opts.K)
	c.leak = sh.opts.TestingKnobs.Leak
	return c
}

// treeConfig is tree t's configuration.
func (sh Shape) treeConfig(t int) ringoram.Config {
	return ringoram.Config{Geometry: sh.geo, Params: ringoram.Params{Z: sh.opts.Z, S: sh.opts.S},
		Layout: ringoram.Layout{Prefix: TreePrefix(t)}, ValueSize: sh.valueSize, CachedLevels: cachedLevels(sh.opts.CachedLevels, sh.geo.L)}
}

// What a replicated entry's first byte says it holds.
const (
	replicaCreate     byte = iota + 1 // the machine's initial image
	replicaInput                      // inputs of the machine (entrycodec.go); a Stash shard's as an earlier build wrote them, its requests with no Name
	replicaNamedInput                 // inputs of a Stash shard, its requests with their Name
)

// Replica is one Stash shard's or one tree's machine in a replicated
// group. Apply, Snapshot and Restore may be called from any goroutine;
// they take turns. An entry holds one input or several, applied in turn;
// Apply returns their outputs, in order, as a slice.
type Replica struct {
	mu      sync.Mutex
	created bool
	inputs  map[byte]func(input []byte) (any, error) // by entry kind: how its inputs are applied
	image   func() []byte
	restore func([]byte) error
	// observe, when set, sees each input and its outputs as they are
	// applied: the driver of the replica leading its group (afterStep).
	observe func(input, output any)
}

// NewStashReplica returns a replica of a Stash shard of a store of shape
// sh. Its outputs are the shard's (stashOutput).
func NewStashReplica(sh Shape) (*Replica, error) {
	r, _, err := newStashReplica(sh)
	return r, err
}

// newStashReplica returns a replica of a Stash shard and its machine.
func newStashReplica(sh Shape) (*Replica, *stashCore, error) {
	seeds, err := newSeeds(sh.opts)
	if err != nil {
		return nil, nil, err
	}
	core := sh.newStashCore(seeds())
	r := &Replica{image: core.image, restore: core.restoreImage}
	r.inputs = map[byte]func([]byte) (any, error){
		replicaNamedInput: stepOf(r, "a Stash shard", decodeStashEntry, core.step),
		replicaInput:      stepOf(r, "a Stash shard", decodeEarlierStashEntry, core.step),
	}
	return r, core, nil
}

// NewTreeReplica returns a replica of tree t of a store of shape sh. Its
// outputs are the tree's machine's (oramOutput).
func NewTreeReplica(sh Shape, t int) (*Replica, error) {
	r, _, err := newTreeReplica(sh, t)
	return r, err
}

// newTreeReplica returns a replica of tree t and its machine.
func newTreeReplica(sh Shape, t int) (*Replica, *oramMachine, error) {
	if t < 0 || t >= sh.opts.Trees {
		return nil, nil, fmt.Errorf("treebeard: tree %d of a store of %d trees", t, sh.opts.Trees)
	}
	tr, err := ringoram.NewTree(sh.treeConfig(t))
	if err != nil {
		return nil, nil, err
	}
	m := &oramMachine{id: t, stashes: sh.opts.StashShards, tree: tr, msgs: newMsgTable(),
		core: sh.newTreeCore(), incarnation: replicatedIncarnation}
	r := &Replica{image: m.image, restore: m.restoreImage}
	r.inputs = map[byte]func([]byte) (any, error){replicaInput: stepOf(r, "a tree", decodeORAMEntry, m.apply)}
	return r, m, nil
}

// replicatedIncarnation is the incarnation a replicated machine's
// messages carry, whichever replica leads: a new leader sends what its
// predecessor sent under the same ids, and a receiver recognises copies
// by id (msgTable).
const replicatedIncarnation = 1

// stepOf returns a step of r that decodes the inputs of machine what an
// entry holds and applies them, all or, when one does not decode, none.
func stepOf[E, O any](r *Replica, what string, decode func(*delta.Decoder) E, apply func(E) O) func([]byte) (any, error) {
	return func(b []byte) (any, error) {
		d := delta.NewDecoder(b)
		var es []E
		for d.More() || len(es) == 0 {
			es = append(es, decode(d))
		}
		if err := d.Done(); err != nil {
			return nil, fmt.Errorf("treebeard: %s's entry: %w", what, err)
		}
		outs := make([]O, len(es))
		for i, e := range es {
			outs[i] = apply(e)
			if r.observe != nil {
				r.observe(e, outs[i])
			}
		}
		return outs, nil
	}
}

// view calls f between two entries.
func (r *Replica) view(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
}

// observeWith makes f see each input and its outputs from now on (nil:
// none).
func (r *Replica) observeWith(f func(input, output any)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.observe = f
}

// Create returns the entry that creates the group's machine: the image of
// this replica's machine, which no entry has created yet (its random
// sources drawn when the replica was made).
func (r *Replica) Create() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return createEntry(r.image())
}

func createEntry(image []byte) []byte { return append([]byte{replicaCreate}, image...) }

// stashInput and treeInput return the entry of one input of a Stash
// shard's machine and of a tree's; stashInputs of several.
func stashInput(e stashEntry) []byte { return appendStashEntry([]byte{replicaNamedInput}, e) }
func treeInput(e oramEntry) []byte   { return appendORAMEntry([]byte{replicaInput}, e) }

func stashInputs(es []stashEntry) []byte {
	b := []byte{replicaNamedInput}
	for _, e := range es {
		b = appendStashEntry(b, e)
	}
	return b
}

// errNotCreated refuses an input to a group whose machine no entry
// created, and errCreatedTwice a second creation.
var (
	errNotCreated   = errors.New("treebeard: an input to a replicated machine before the entry that creates it")
	errCreatedTwice = errors.New("treebeard: a replicated machine created twice")
	errEntryKind    = errors.New("treebeard: a replicated entry of no known kind")
)

// Apply applies one committed entry and returns its outputs; an error is
// the same on every replica and changes nothing.
func (r *Replica) Apply(entry []byte) (any, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(entry) == 0 {
		return nil, errEntryKind
	}
	switch kind, body := entry[0], entry[1:]; {
	case kind == replicaCreate && r.created:
		return nil, errCreatedTwice
	case kind == replicaCreate:
		if err := r.restore(body); err != nil {
			return nil, err
		}
		r.created = true
		return nil, nil
	case r.inputs[kind] == nil:
		return nil, errEntryKind
	case !r.created:
		return nil, errNotCreated
	default:
		return r.inputs[kind](body)
	}
}

// Snapshot returns the machine's image, nil before it is created.
func (r *Replica) Snapshot() ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.created {
		return nil, nil
	}
	return r.image(), nil
}

// Restore replaces the machine's state by a snapshot; an empty one is of
// a group whose machine no entry created yet.
func (r *Replica) Restore(snapshot []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(snapshot) == 0 {
		r.created = false
		return nil
	}
	if err := r.restore(snapshot); err != nil {
		return err
	}
	r.created = true
	return nil
}
