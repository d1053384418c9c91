package treebeard

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/oblivkv/oblivkv/internal/durable/delta"
)

// An ORAM shard as a replicated group: one machine per tree it owns (a
// shard's trees share nothing, orammachine.go), in one group, each
// entry naming its tree. The trees' drivers (treeWorker) lead them
// together for the group's term.

// NewORAMShardReplica returns a replica of ORAM shard k of a store of
// shape sh whose trees are spread over shards shards: the trees t with t
// mod shards = k, as a store in one process spreads them.
func NewORAMShardReplica(sh Shape, k, shards int) (*Replica, error) {
	r, _, err := newORAMShardReplica(sh, k, shards)
	return r, err
}

// shardTree is one tree of an ORAM shard's replica.
type shardTree struct {
	replica *Replica // its own machine's, whose step the shard's runs
	machine *oramMachine
}

// newORAMShardReplica returns a replica of ORAM shard k and its trees, by
// tree.
func newORAMShardReplica(sh Shape, k, shards int) (*Replica, map[int]shardTree, error) {
	if shards < 1 || k < 0 || k >= shards || shards > sh.opts.Trees {
		return nil, nil, fmt.Errorf("treebeard: ORAM shard %d of %d over %d trees", k, shards, sh.opts.Trees)
	}
	trees := map[int]shardTree{}
	for t := k; t < sh.opts.Trees; t += shards {
		r, m, err := newTreeReplica(sh, t)
		if err != nil {
			return nil, nil, err
		}
		trees[t] = shardTree{replica: r, machine: m}
	}
	order := slices.Sorted(maps.Keys(trees))
	r := &Replica{
		inputs: map[byte]func([]byte) (any, error){replicaInput: func(b []byte) (any, error) {
			d := delta.NewDecoder(b)
			t := int(d.Uvarint())
			tr, ok := trees[t]
			if d.Failed() || !ok {
				return nil, fmt.Errorf("treebeard: an entry of ORAM shard %d for tree %d, which it does not own", k, t)
			}
			return tr.replica.inputs[replicaInput](d.Rest())
		}},
		image: func() []byte {
			images := make([][]byte, len(order))
			for i, t := range order {
				images[i] = trees[t].replica.image()
			}
			return encodeGob(images)
		},
		restore: func(b []byte) error {
			var images [][]byte
			if err := decodeGob(b, &images); err != nil || len(images) != len(order) {
				return fmt.Errorf("treebeard: ORAM shard %d's state holds %d trees, not %d (%v)", k, len(images), len(order), err)
			}
			for i, t := range order {
				if err := trees[t].replica.restore(images[i]); err != nil {
					return err
				}
			}
			return nil
		},
	}
	return r, trees, nil
}

// treeInputOf returns the entry of inputs of tree t of an ORAM shard,
// which the tree's machine applies in order.
func treeInputOf(t int, es ...oramEntry) []byte {
	b := binary.AppendUvarint([]byte{replicaInput}, uint64(t))
	for _, e := range es {
		b = appendORAMEntry(b, e)
	}
	return b
}

// takeOver issues again, as the group's new leader, what the tree's
// machine says is outstanding (oramMachine.outstanding): the Write last
// committed, which storage may lack, sealed again and issued on its own
// first (storage sees at most the same buckets written twice in a row,
// after the new leader's fence claim), then the I/O its operation in
// progress waits for, as it asked for it (a Read retried reads the same
// slots). It starts the timers of the epochs waiting for a part.
func (w *treeWorker) takeOver(ctx context.Context) error {
	var out oramOutput
	w.group.view(func() { out = w.m.outstanding() })
	if len(out.IO) > 0 && out.IO[0].Record == nil && out.IO[0].Write != nil { // no operation's own Write: those last committed
		items, err := w.tree.Seal(out.IO[0].Write)
		if err != nil {
			return err
		}
		w.tree.Hold(items)
		if err := w.flush(ctx); err != nil {
			return err
		}
		out.IO = out.IO[1:]
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timeParts(out)
	if out.hasIO() {
		w.io = append(w.io, out)
	}
	w.wakeUp()
	return nil
}
