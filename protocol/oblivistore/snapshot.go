package oblivistore

import (
	"cmp"
	"errors"
	"fmt"
	"iter"

	"github.com/oblivkv/oblivkv/kv"
)

// stateFormat is the format of the core's snapshot: 2 since the Front
// and the partition groups became machines of their own.
const stateFormat = 2

// State is the core's snapshot: each machine's.
type State struct {
	Format        int
	FrontMachine  []byte
	GroupMachines [][]byte
}

// ErrEarlierBuild refuses a store whose state an earlier build wrote.
var ErrEarlierBuild = fmt.Errorf("%w: this oblivistore store was written by an earlier build of oblivkv, whose state this build cannot read; "+
	"copy its keys out with that build and load them into a new store", kv.ErrMismatch)

// Snapshot encodes the core's whole state: every machine's snapshot.
func (c *Core) Snapshot() ([]byte, error) {
	st := State{Format: stateFormat}
	var err error
	if st.FrontMachine, err = c.front.Snapshot(); err != nil {
		return nil, err
	}
	for _, g := range c.groups {
		b, err := g.Snapshot()
		if err != nil {
			return nil, err
		}
		st.GroupMachines = append(st.GroupMachines, b)
	}
	return encodeState(&st)
}

// Restore returns the core a Snapshot encoded.
func Restore(b []byte) (*Core, error) {
	var st State
	if err := decodeState(b, &st); err != nil || st.Format != stateFormat {
		if earlierBuild(b) {
			return nil, ErrEarlierBuild
		}
		return nil, cmp.Or(err, fmt.Errorf("oblivistore: unknown state format %d", st.Format))
	}
	front := &FrontMachine{}
	if err := front.Restore(st.FrontMachine); err != nil {
		return nil, err
	}
	var groups []*GroupMachine
	for _, b := range st.GroupMachines {
		g := &GroupMachine{}
		if err := g.Restore(b); err != nil {
			return nil, err
		}
		groups = append(groups, g)
	}
	return assemble(front, groups)
}

// assemble returns the core of the Front and the partition groups,
// restored each on its own.
func assemble(front *FrontMachine, groups []*GroupMachine) (*Core, error) {
	if len(groups) != len(front.st.Sent) {
		return nil, internal("a state of %d groups holds %d", len(front.st.Sent), len(groups))
	}
	for i, g := range groups {
		if g.st.Group.Index != int32(i) {
			return nil, internal("group %d holds the state of group %d", i, g.st.Group.Index)
		}
	}
	return &Core{front: front, groups: groups}, nil
}

// earlierBuild reports whether b is the state of an earlier build: one
// core holding the Front and a Server of every partition.
func earlierBuild(b []byte) bool {
	var st struct{ Server struct{ Geo geometry } }
	return decodeState(b, &st) == nil && st.Server.Geo.Partitions > 0
}

// fill makes the maps an empty state or gob leaves nil.
func (f *Front) fill() {
	fillMap(&f.Pos)
	fillMap(&f.Mem)
	if len(f.Queues) < f.Partitions {
		f.Queues = append(f.Queues, make([][]string, f.Partitions-len(f.Queues))...)
	}
}

// ErrNotEmpty reports a bulk load into a store that holds keys or is busy.
var ErrNotEmpty = errors.New("oblivistore: bulk load needs an empty, idle store")

// Load fills an empty, idle core with items (later duplicates win): each
// key goes to a random partition's top level, every partition's top level
// is written (dummies where it has no keys) and the other levels are
// emptied, the state the paper warms its stores up to. It returns the
// writes, one per partition, and the number of keys.
func (c *Core) Load(items iter.Seq2[string, []byte]) ([]*WriteIO, int, error) {
	f := &c.front.st.Front
	if f.Keys > 0 || !c.Idle() || c.shuffling() {
		return nil, 0, ErrNotEmpty
	}
	vals := map[string][]byte{}
	var order []string
	for k, v := range items {
		if _, dup := vals[k]; !dup {
			order = append(order, k)
		}
		vals[k] = v
	}
	if len(order) > f.Capacity {
		return nil, 0, fmt.Errorf("%w: %d keys for a capacity of %d", kv.ErrFull, len(order), f.Capacity)
	}
	per := make([][]Entry, f.Partitions)
	for _, k := range order {
		p := c.front.randomPart()
		per[p] = append(per[p], Entry{Key: k, Val: vals[k]})
		f.Pos[k] = p
	}
	var writes []*WriteIO
	for _, g := range c.groups {
		w, err := g.st.Group.load(g, per)
		if err != nil {
			return nil, 0, err
		}
		writes = append(writes, w...)
	}
	f.Queues = make([][]string, f.Partitions)
	f.Keys = len(order)
	return writes, len(order), nil
}

// shuffling reports whether a group has a shuffle in progress.
func (c *Core) shuffling() bool {
	for _, g := range c.groups {
		if len(g.st.Group.Jobs) > 0 {
			return true
		}
	}
	return false
}

// load lays out each of the group's partitions' blocks in its top level,
// the other levels empty, and returns the writes, one per partition.
func (s *Group) load(c *GroupMachine, per [][]Entry) ([]*WriteIO, error) {
	top := int8(s.Geo.Top)
	var writes []*WriteIO
	for p, blocks := range per {
		if !s.owns(int32(p)) {
			continue
		}
		if len(blocks) > 1<<top {
			return nil, fmt.Errorf("%w: partition %d, %d blocks for %d places", ErrOverflow, p, len(blocks), 1<<top)
		}
		part := &s.Parts[p]
		for l := range part.Levels {
			part.Levels[l] = Level{}
		}
		j := &Job{P: int32(p), Staged: sorted[string, []byte]{}}
		io := &WriteIO{Group: s.Index}
		part.Levels[top] = s.writeLevel(c, j, top, blocks, io)
		c.trace.placed(int32(p), top, &part.Levels[top], c.trace.gatheringOrder(blocks))
		for k := range j.Staged {
			loc := s.Where[k]
			loc.Where = inLevel
			s.Where[k] = loc
		}
		part.C, part.J = 1<<top, 0
		writes = append(writes, io)
	}
	return writes, nil
}

// checkOptions refuses to reopen a store with options other than those it
// was made with.
func (c *Core) checkOptions(o Options, n int) error {
	g := o.geometry(n)
	f, s := newFront(n, g, o), newGroup(g, o, 0)
	have, haveGroup := &c.front.st.Front, &c.groups[0].st.Group
	f.Opts.Leak, s.Opts.Leak = have.Opts.Leak, haveGroup.Opts.Leak
	f.Opts.ValueSize = have.Opts.ValueSize // kv checks the value size
	if g != haveGroup.Geo || f.Opts != have.Opts || s.Opts != haveGroup.Opts {
		return fmt.Errorf("%w: oblivistore was made with %s; asked for %s",
			kv.ErrMismatch, describe(haveGroup.Geo, have.Opts, haveGroup.Opts), describe(g, f.Opts, s.Opts))
	}
	return nil
}

func describe(g geometry, f frontOptions, s groupOptions) string {
	return fmt.Sprintf("partitions=%d groups=%d evictionrate=%v earlycacheins=%d shufflingbuffer=%d evictionsahead=%d shuffleioperaccess=%d shuffleioahead=%d",
		g.Partitions, g.Groups, f.EvictionRate, f.EarlyCacheIns, s.ShufflingBuffer, f.EvictionsAhead, s.ShuffleIOPerAccess, s.ShuffleIOAhead)
}
