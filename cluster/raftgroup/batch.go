package raftgroup

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/oblivkv/oblivkv/internal/durable/delta"
)

// batchExtension marks a log entry that holds several proposals
// (encodeBatch), applied in order as if each were an entry of its own.
var batchExtension = []byte("oblivkv batch 1")

// proposal is one Propose waiting for its entry to be applied.
type proposal struct {
	entry []byte
	done  chan proposed // buffered: the proposer may have given up
}

// proposed is a proposal's outcome: raft's error (nothing applied, or
// unknown), else what the machine returned.
type proposed struct {
	applied
	raftErr error
}

// proposer is group commit for proposals: at most limit entries are
// being committed at once, and the proposals that arrive meanwhile wait
// and go as one entry when one of those is done. Under load a group then
// commits (and each replica syncs its log) once per batch instead of
// once per proposal; a lone proposal goes at once, as its own entry.
type proposer struct {
	raft  *raft.Raft
	limit int
	// committed is told each entry's commit latency.
	committed func(time.Duration)

	mu       sync.Mutex
	queue    []*proposal
	inflight int
}

// propose queues p, and sends the queue as an entry if fewer than limit
// are in flight.
func (b *proposer) propose(p *proposal) {
	b.mu.Lock()
	b.queue = append(b.queue, p)
	if b.inflight >= b.limit {
		b.mu.Unlock()
		return
	}
	batch := b.queue
	b.queue = nil
	b.inflight++
	b.mu.Unlock()
	go b.run(batch)
}

// run commits batch, then every batch queued meanwhile, until the queue
// is empty.
func (b *proposer) run(batch []*proposal) {
	for {
		b.commit(batch)
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.inflight--
			b.mu.Unlock()
			return
		}
		batch = b.queue
		b.queue = nil
		b.mu.Unlock()
	}
}

// commit appends batch as one entry and hands each proposal its outcome.
func (b *proposer) commit(batch []*proposal) {
	start := time.Now()
	var f raft.ApplyFuture
	if len(batch) == 1 {
		f = b.raft.Apply(batch[0].entry, 0)
	} else {
		f = b.raft.ApplyLog(raft.Log{Data: encodeBatch(batch), Extensions: batchExtension}, 0)
	}
	if err := f.Error(); err != nil {
		for _, p := range batch {
			p.done <- proposed{raftErr: err}
		}
		return
	}
	b.committed(time.Since(start))
	outs, ok := f.Response().([]applied)
	for i, p := range batch {
		switch {
		case ok:
			p.done <- proposed{applied: outs[i]}
		default: // one entry, or a batch the machine never saw (decodeBatch failed)
			p.done <- proposed{applied: f.Response().(applied)}
		}
	}
}

// encodeBatch encodes the entries of batch, each with its length.
func encodeBatch(batch []*proposal) []byte {
	n := 0
	for _, p := range batch {
		n += len(p.entry) + binary.MaxVarintLen64
	}
	b := binary.AppendUvarint(make([]byte, 0, n+binary.MaxVarintLen64), uint64(len(batch)))
	for _, p := range batch {
		b = delta.AppendBytes(b, p.entry)
	}
	return b
}

// decodeBatch returns encodeBatch's entries, refusing short or trailing
// input.
func decodeBatch(b []byte) ([][]byte, error) {
	d := delta.NewDecoder(b)
	n := d.Uvarint()
	if n > uint64(len(b)) { // each entry takes at least its length's byte
		return nil, fmt.Errorf("raftgroup: a batch entry claims %d entries in %d bytes", n, len(b))
	}
	entries := make([][]byte, n)
	for i := range entries {
		entries[i] = d.Bytes(math.MaxInt)
	}
	if err := d.Done(); err != nil {
		return nil, fmt.Errorf("raftgroup: a batch entry: %w", err)
	}
	return entries, nil
}

// apply applies log entry l to m: each of a batch's entries in turn
// ([]applied), or the entry itself (applied).
func apply(m Machine, l *raft.Log) any {
	if !bytes.Equal(l.Extensions, batchExtension) {
		out, err := m.Apply(l.Data)
		return applied{out: out, err: err}
	}
	entries, err := decodeBatch(l.Data)
	if err != nil {
		return applied{err: err}
	}
	outs := make([]applied, len(entries))
	for i, e := range entries {
		outs[i].out, outs[i].err = m.Apply(e)
	}
	return outs
}
