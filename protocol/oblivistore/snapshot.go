package oblivistore

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"

	"github.com/oblivkv/oblivkv/kv"
)

// Snapshot encodes the core's whole state, its random source included.
func (c *Core) Snapshot() ([]byte, error) {
	var err error
	if c.st.Pub, err = c.pubSrc.MarshalBinary(); err != nil {
		return nil, err
	}
	if c.st.Sec, err = c.secSrc.MarshalBinary(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	err = gob.NewEncoder(&buf).Encode(&c.st)
	c.st.Pub, c.st.Sec = nil, nil
	return buf.Bytes(), err
}

// Restore returns the core a Snapshot encoded.
func Restore(b []byte) (*Core, error) {
	c := &Core{}
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&c.st); err != nil {
		return nil, fmt.Errorf("oblivistore: decoding the state: %w", err)
	}
	c.pubSrc, c.secSrc = &rand.ChaCha8{}, &rand.ChaCha8{}
	if err := errors.Join(c.pubSrc.UnmarshalBinary(c.st.Pub), c.secSrc.UnmarshalBinary(c.st.Sec)); err != nil {
		return nil, fmt.Errorf("oblivistore: decoding the random sources: %w", err)
	}
	c.st.Pub, c.st.Sec = nil, nil
	c.pub, c.sec = rand.New(c.pubSrc), rand.New(c.secSrc)
	c.fill()
	return c, nil
}

// fill makes the maps and slices gob leaves nil when empty.
func (c *Core) fill() {
	st := &c.st
	if st.ReadOwner == nil {
		st.ReadOwner = map[uint64]uint64{}
	}
	if st.Pos == nil {
		st.Pos = map[string]Loc{}
	}
	if st.Mem == nil {
		st.Mem = map[string]*Held{}
	}
	if st.Reads == nil {
		st.Reads = map[uint64]*ReadIO{}
	}
	if st.Writes == nil {
		st.Writes = map[uint64]*WriteIO{}
	}
	if len(st.Queues) < st.Geo.Partitions {
		st.Queues = append(st.Queues, make([][]string, st.Geo.Partitions-len(st.Queues))...)
	}
	for _, j := range st.Jobs {
		if j.ReadIDs == nil {
			j.ReadIDs = map[uint64]bool{}
		}
		if j.Staged == nil && j.Computed {
			j.Staged = map[string][]byte{}
		}
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
	if c.st.Keys > 0 || !c.Idle() || len(c.st.Jobs) > 0 {
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
	if len(order) > c.st.Capacity {
		return nil, 0, fmt.Errorf("%w: %d keys for a capacity of %d", kv.ErrFull, len(order), c.st.Capacity)
	}
	per := make([][]entry, c.st.Geo.Partitions)
	for _, k := range order {
		p := c.randomPart()
		per[p] = append(per[p], entry{k, vals[k]})
	}
	top := int8(c.st.Geo.Top)
	writes := make([]*WriteIO, len(per))
	for p, blocks := range per {
		if len(blocks) > 1<<top {
			return nil, 0, fmt.Errorf("%w: partition %d, %d blocks for %d places", ErrOverflow, p, len(blocks), 1<<top)
		}
		part := &c.st.Parts[p]
		for l := range part.Levels {
			part.Levels[l] = Level{}
		}
		j := &Job{P: int32(p)}
		j.Staged = map[string][]byte{}
		io := &WriteIO{}
		part.Levels[top] = c.writeLevel(j, top, blocks, io)
		for k := range j.Staged {
			loc := c.st.Pos[k]
			loc.Where = inLevel
			c.st.Pos[k] = loc
		}
		part.C, part.J = 1<<top, 0
		writes[p] = io
	}
	c.st.Queues = make([][]string, c.st.Geo.Partitions)
	c.st.Keys = len(order)
	return writes, len(order), nil
}

// checkOptions refuses to reopen a store with options other than those it
// was made with.
func (c *Core) checkOptions(o Options, n int) error {
	want := coreOptionsOf(o)
	want.Leak = c.st.Opts.Leak
	if g := o.geometry(n); g != c.st.Geo || want != c.st.Opts {
		return fmt.Errorf("%w: oblivistore was made with %d partitions and %s; asked for %d and %s",
			kv.ErrMismatch, c.st.Geo.Partitions, c.st.Opts, g.Partitions, want)
	}
	return nil
}

func (o coreOptions) String() string {
	return fmt.Sprintf("evictionrate=%v earlycacheins=%d shufflingbuffer=%d evictionsahead=%d shuffleioperaccess=%d shuffleioahead=%d",
		o.EvictionRate, o.EarlyCacheIns, o.ShufflingBuffer, o.EvictionsAhead, o.ShuffleIOPerAccess, o.ShuffleIOAhead)
}
