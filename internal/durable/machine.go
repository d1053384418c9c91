package durable

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
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

// Replay rebuilds m, a store that is one machine (machine 0), from the
// log: ReplayMachines with m alone. It returns how many records it
// applied.
func (l *Log) Replay(ctx context.Context, m Machine) (applied int, err error) {
	n, err := l.ReplayMachines(ctx, map[MachineID]Machine{0: m})
	return n[0], err
}

// ReplayMachines rebuilds a store's machines from the log: it reads every
// machine's latest checkpoint and its records after it (checking the
// anchor on storage: ErrLost, ErrRollback, ErrNoJournal), then for each
// machine of machines restores it from its own checkpoint and applies
// its own records, in order, and no other machine's; then it redoes, in
// order, every backend operation those records planned, machine by
// machine. A machine that fails to restore or apply fails the replay,
// naming it and its record, after every other machine has been rebuilt;
// nothing is redone then. A machine in the journal and not in machines,
// unless retired (Retire), fails the replay, as does one in machines
// without a checkpoint. It returns how many records each machine
// applied. What a recovery does next (finish work a crash cut short,
// write afresh a bulk load cut short, checkpoint) is the protocol's.
func (l *Log) ReplayMachines(ctx context.Context, machines map[MachineID]Machine) (applied map[MachineID]int, err error) {
	recs, err := l.recover(ctx)
	if err != nil {
		return nil, err
	}
	var errs []error
	for id, r := range recs {
		if _, ok := machines[id]; !ok && (len(r.state) > 0 || len(r.deltas) > 0) {
			errs = append(errs, fmt.Errorf("durable: the journal holds machine %d, which the store does not have", id))
		}
	}
	applied = map[MachineID]int{}
	var ops []Op
	for _, id := range slices.Sorted(maps.Keys(machines)) {
		r := recs[id]
		if r == nil {
			errs = append(errs, fmt.Errorf("%w: machine %d has no checkpoint", ErrLost, id))
			continue
		}
		n, err := replayOne(machines[id], r)
		applied[id] = n
		if err != nil {
			errs = append(errs, fmt.Errorf("machine %d: %w", id, err))
		}
		ops = append(ops, r.ops...)
	}
	if err := errors.Join(errs...); err != nil {
		return applied, err
	}
	return applied, l.redo(ctx, ops)
}

// replayOne restores m from its checkpoint and applies its records.
func replayOne(m Machine, r *machineRecovery) (int, error) {
	if err := m.Restore(r.state); err != nil {
		return 0, err
	}
	for i, delta := range r.deltas {
		if err := m.Apply(delta); err != nil {
			return i, fmt.Errorf("journal record %d after the checkpoint (position %d): %w", i+1, r.lsns[i], err)
		}
	}
	return len(r.deltas), nil
}

// CheckpointOf replaces machine 0's records by m's snapshot, at the last
// record appended (MachineLog.CheckpointOf).
func (l *Log) CheckpointOf(ctx context.Context, m Snapshotter) error {
	return l.Machine(0).CheckpointOf(ctx, m)
}

// CheckpointOf replaces the machine's records by s's snapshot, at the
// journal's last record. The caller holds off the machine's appends
// until it returns, so that the snapshot includes exactly its records up
// to that one; other machines append meanwhile. A log that keeps nothing
// takes no snapshot.
func (m *MachineLog) CheckpointOf(ctx context.Context, s Snapshotter) error {
	if m.l.j == nil {
		return nil
	}
	at := m.l.Last()
	st, err := s.Snapshot()
	if err != nil {
		return err
	}
	return m.Checkpoint(ctx, st, at)
}

// CheckpointMachines replaces the records of each machine of states by
// its state, all at the journal's position at, which every state includes
// exactly the machine's records up to, in the order of their IDs, with
// one anchor, so storage sees one checkpoint (MachineLog.Checkpoint is
// the case of one machine). The caller holds off those machines' appends
// until it returns.
func (l *Log) CheckpointMachines(ctx context.Context, states map[MachineID][]byte, at uint64) error {
	if l.j == nil {
		return nil
	}
	// The anchor must never name a record the journal could lose.
	if err := l.j.Sync(at); err != nil {
		return err
	}
	if err := l.writeAnchor(ctx, at); err != nil {
		return err
	}
	for _, m := range slices.Sorted(maps.Keys(states)) {
		if err := l.Machine(m).replaceRecords(ctx, states[m], at); err != nil {
			return err
		}
	}
	return nil
}

// Retire ends a machine the store no longer has (an earlier build's
// whole-store machine 0, once its state lives in machines of their own):
// an empty checkpoint at the journal's last record, which ReplayMachines
// passes over. The caller appends no record of it afterwards.
func (m *MachineLog) Retire(ctx context.Context) error {
	if m.l.j == nil {
		return nil
	}
	return m.Checkpoint(ctx, nil, m.l.Last())
}
