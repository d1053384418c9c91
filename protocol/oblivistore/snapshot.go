package oblivistore

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/random"
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
	var errPub, errSec error
	c.pubSrc, errPub = random.Restore(c.st.Pub)
	c.secSrc, errSec = random.Restore(c.st.Sec)
	if err := errors.Join(errPub, errSec); err != nil {
		return nil, fmt.Errorf("oblivistore: decoding the random sources: %w", err)
	}
	c.st.Pub, c.st.Sec = nil, nil
	c.pub, c.sec = rand.New(c.pubSrc), rand.New(c.secSrc)
	c.fill()
	return c, nil
}

// fill makes the maps gob leaves nil when empty.
func (c *Core) fill() {
	f, s := c.front(), c.server()
	if f.Pos == nil {
		f.Pos = map[string]int32{}
	}
	if f.Mem == nil {
		f.Mem = map[string]*Held{}
	}
	if len(f.Queues) < f.Partitions {
		f.Queues = append(f.Queues, make([][]string, f.Partitions-len(f.Queues))...)
	}
	if s.Where == nil {
		s.Where = map[string]Loc{}
	}
	if s.Reads == nil {
		s.Reads = map[uint64]*ReadIO{}
	}
	if s.ReadOwner == nil {
		s.ReadOwner = map[uint64]uint64{}
	}
	if s.Writes == nil {
		s.Writes = map[uint64]*WriteIO{}
	}
	if s.Pending == nil {
		s.Pending = map[uint64]*PendingRead{}
	}
	if s.Waiters == nil {
		s.Waiters = map[Slot]uint64{}
	}
	if s.Reread == nil {
		s.Reread = map[string]Slot{}
	}
	for _, j := range s.Jobs {
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
	f, s := c.front(), c.server()
	if f.Keys > 0 || !c.Idle() || len(s.Jobs) > 0 {
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
		p := c.randomPart()
		per[p] = append(per[p], Entry{Key: k, Val: vals[k]})
		f.Pos[k] = p
	}
	writes, err := s.load(c, per)
	if err != nil {
		return nil, 0, err
	}
	f.Queues = make([][]string, f.Partitions)
	f.Keys = len(order)
	return writes, len(order), nil
}

// load lays out each partition's blocks in its top level, the other
// levels empty, and returns the writes, one per partition.
func (s *Server) load(c *Core, per [][]Entry) ([]*WriteIO, error) {
	top := int8(s.Geo.Top)
	writes := make([]*WriteIO, len(per))
	for p, blocks := range per {
		if len(blocks) > 1<<top {
			return nil, fmt.Errorf("%w: partition %d, %d blocks for %d places", ErrOverflow, p, len(blocks), 1<<top)
		}
		part := &s.Parts[p]
		for l := range part.Levels {
			part.Levels[l] = Level{}
		}
		j := &Job{P: int32(p), Staged: map[string][]byte{}}
		io := &WriteIO{}
		part.Levels[top] = s.writeLevel(c, j, top, blocks, io)
		c.tracePlaced(int32(p), top, &part.Levels[top], c.gatheringOrder(blocks))
		for k := range j.Staged {
			loc := s.Where[k]
			loc.Where = inLevel
			s.Where[k] = loc
		}
		part.C, part.J = 1<<top, 0
		writes[p] = io
	}
	return writes, nil
}

// checkOptions refuses to reopen a store with options other than those it
// was made with.
func (c *Core) checkOptions(o Options, n int) error {
	g := o.geometry(n)
	f, s := newFront(n, g, o), newServer(g, o)
	f.Opts.Leak, s.Opts.Leak = c.st.Front.Opts.Leak, c.st.Server.Opts.Leak
	f.Opts.ValueSize = c.st.Front.Opts.ValueSize // kv checks the value size
	if g != c.st.Server.Geo || f.Opts != c.st.Front.Opts || s.Opts != c.st.Server.Opts {
		return fmt.Errorf("%w: oblivistore was made with %s; asked for %s",
			kv.ErrMismatch, describe(c.st.Server.Geo, c.st.Front.Opts, c.st.Server.Opts), describe(g, f.Opts, s.Opts))
	}
	return nil
}

func describe(g geometry, f frontOptions, s serverOptions) string {
	return fmt.Sprintf("partitions=%d evictionrate=%v earlycacheins=%d shufflingbuffer=%d evictionsahead=%d shuffleioperaccess=%d shuffleioahead=%d",
		g.Partitions, f.EvictionRate, f.EarlyCacheIns, s.ShufflingBuffer, f.EvictionsAhead, s.ShuffleIOPerAccess, s.ShuffleIOAhead)
}
