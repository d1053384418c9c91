package durable

import (
	"context"
	"fmt"
)

// Snapshotter is a state that can be taken whole, for a checkpoint.
type Snapshotter interface {
	// Snapshot returns the whole state, as a checkpoint holds it.
	Snapshot() ([]byte, error)
}

// Machine is a protocol's trusted state as its log rebuilds it, in the
// spirit of hashicorp/raft's FSM: a snapshot (a checkpoint's content) is
// restored, then each journaled record is applied in order. Restoring
// and applying must be deterministic and never touch storage: the same
// checkpoint and records give the same state, and what storage sees of a
// recovery is the log's redone writes and what the protocol does after
// Replay.
type Machine interface {
	Snapshotter
	// Restore replaces the state by a snapshot.
	Restore(snapshot []byte) error
	// Apply applies one record's delta (the bytes the protocol journaled
	// with Append or Commit) to the state, as the transition that
	// journaled it changed it.
	Apply(record []byte) error
}

// Replay rebuilds m from the log: it reads the last checkpoint and the
// records after it (checking the anchor on storage: ErrLost, ErrRollback,
// ErrNoJournal), restores m from the checkpoint, applies every record
// after it in order, then redoes, in order, every backend operation those
// records planned. It returns how many records it applied. What a
// recovery does next (finish work a crash cut short, write afresh a bulk
// load cut short, checkpoint) is the protocol's.
func (l *Log) Replay(ctx context.Context, m Machine) (applied int, err error) {
	r, err := l.recover(ctx)
	if err != nil {
		return 0, err
	}
	if err := m.Restore(r.state); err != nil {
		return 0, err
	}
	for i, delta := range r.deltas {
		if err := m.Apply(delta); err != nil {
			return i, fmt.Errorf("journal record %d after the checkpoint: %w", i+1, err)
		}
	}
	return len(r.deltas), l.redo(ctx, r)
}

// CheckpointOf replaces the journal by m's snapshot, at the last record
// appended (Checkpoint). The caller holds off appends until it returns,
// so that the snapshot includes exactly the records up to that one. A log
// that keeps nothing takes no snapshot.
func (l *Log) CheckpointOf(ctx context.Context, m Snapshotter) error {
	if l.j == nil {
		return nil
	}
	st, err := m.Snapshot()
	if err != nil {
		return err
	}
	return l.Checkpoint(ctx, st, l.Last())
}
