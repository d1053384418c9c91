package oblivistore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/oblivkv/oblivkv/internal/durable"
)

// Each machine has its own log in the store's journal (durable.MachineLog):
// the Front's holds its entries (requests, the groups' messages, reseeds),
// a group's its own (the Front's messages, its read results and write
// completions, reseeds). The entries a machine applied in one step, and
// in the steps after it until another machine's record comes between,
// are one record (appendEntries, machineLogs.append), each encoded by
// AppendFrontEntry or AppendGroupEntry, acknowledgements alone aside
// (Core.Entries), and each as the machine applies it: less a value read
// from storage that it does not keep (GroupMachine.lean,
// FrontMachine.lean), such as the one a blind write replaces unread. A
// machine is checkpointed on its own, at its own position, while the
// others go on, and recovery rebuilds each from its own checkpoint and
// entries alone. An earlier build journaled the inputs of the whole core
// as machine 0; such a store is recovered that way once, then
// checkpointed machine by machine and machine 0 retired.

// legacyMachine is the journal's machine of an earlier build's store:
// the whole core, its records the core's inputs.
const legacyMachine durable.MachineID = 0

// machineOf is machine n's name in the journal: the Front's is 1, group
// g's 2+g.
func machineOf(n Node) durable.MachineID { return durable.MachineID(int64(n) + 2) }

// machineLogs are the logs of a store's machines, and the checkpoints
// under way.
type machineLogs struct {
	log   *durable.Log
	front *durable.MachineLog
	group []*durable.MachineLog

	// open holds the entries of machine openOf not yet appended: the
	// record being gathered (append, flush). buf is flush's, reused
	// (Append copies the record); lsn is the LSN of its last record.
	open   [][]byte
	openOf Node
	buf    []byte
	lsn    uint64

	mu   sync.Mutex
	busy map[Node]bool // machines whose checkpoint is being written
	err  error         // the first checkpoint that failed
	wg   sync.WaitGroup
}

func newMachineLogs(log *durable.Log, groups int) *machineLogs {
	l := &machineLogs{log: log, front: log.Machine(machineOf(FrontNode)), busy: map[Node]bool{}}
	for g := range groups {
		l.group = append(l.group, log.Machine(machineOf(Node(g))))
	}
	return l
}

// of returns machine n's log.
func (l *machineLogs) of(n Node) *durable.MachineLog {
	if n == FrontNode {
		return l.front
	}
	return l.group[n]
}

// nodes returns every machine: the Front, then the groups.
func (l *machineLogs) nodes() []Node {
	out := []Node{FrontNode}
	for g := range l.group {
		out = append(out, Node(g))
	}
	return out
}

// append journals the entries a step applied, those of each machine in
// one record of its log (appendEntries), in the order of their first
// entries. A machine's record is gathered until another machine's
// follows it, or until flush: records of one machine with no other's
// between them are one, the steps' records in the order they had, and
// one write of the journal holds what a crash could have cut between
// them.
func (l *machineLogs) append(entries []Applied) {
	if !l.log.Durable() {
		return
	}
	for i, e := range entries {
		if slices.ContainsFunc(entries[:i], func(a Applied) bool { return a.Machine == e.Machine }) {
			continue // in the record of the machine's first entry
		}
		if e.Machine != l.openOf {
			l.flush()
			l.openOf = e.Machine
		}
		for _, a := range entries[i:] {
			if a.Machine == e.Machine {
				l.open = append(l.open, a.Entry)
			}
		}
	}
}

// flush appends the record being gathered, if any, and returns the LSN
// of the last record appended: what the journal must hold before any
// output of the entries appended so far leaves the process.
func (l *machineLogs) flush() uint64 {
	if len(l.open) > 0 {
		l.buf = appendEntries(l.buf[:0], l.open)
		l.lsn = l.of(l.openOf).Append(l.buf)
		clear(l.open)
		l.open = l.open[:0]
	}
	return l.lsn
}

// snapshotOf returns machine n's snapshot.
func (c *Core) snapshotOf(n Node) ([]byte, error) {
	if n == FrontNode {
		return c.front.Snapshot()
	}
	return c.groups[n].Snapshot()
}

// checkpointDue starts the checkpoint of every machine whose log is due
// and has none under way: its snapshot is taken now, on the loop, at the
// journal's last record, and written by a goroutine of its own while the
// loop goes on applying entries, to it and to the other machines. It
// returns the error of a checkpoint that failed since the last call.
func (s *store) checkpointDue() error {
	l := s.logs
	l.mu.Lock()
	err := l.err
	l.mu.Unlock()
	if err != nil {
		return err
	}
	for _, n := range l.nodes() {
		ml := l.of(n)
		l.mu.Lock()
		busy := l.busy[n]
		l.mu.Unlock()
		if busy || !ml.Due() {
			continue
		}
		at := l.log.Last()
		st, err := s.core.snapshotOf(n)
		if err != nil {
			return err
		}
		l.mu.Lock()
		l.busy[n] = true
		l.mu.Unlock()
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			err := ml.Checkpoint(context.Background(), st, at)
			l.mu.Lock()
			defer l.mu.Unlock()
			delete(l.busy, n)
			if err != nil && l.err == nil {
				l.err = fmt.Errorf("checkpoint of machine %d: %w", ml.ID(), err)
			}
		}()
	}
	return nil
}

// checkpointAll checkpoints every machine at the journal's last record,
// once the checkpoints under way are written; the caller holds off
// appends (on the loop, or before it runs, or after it ended).
func (s *store) checkpointAll(ctx context.Context) error {
	s.logs.wg.Wait()
	for _, n := range s.logs.nodes() {
		if err := s.logs.of(n).CheckpointOf(ctx, machineSnapshot{s.core, n}); err != nil {
			return err
		}
	}
	return nil
}

// machineSnapshot is one machine of a core, as durable takes its
// snapshot.
type machineSnapshot struct {
	core *Core
	node Node
}

func (m machineSnapshot) Snapshot() ([]byte, error) { return m.core.snapshotOf(m.node) }

// create starts the journal of a new store with each machine's snapshot.
func (s *store) create(ctx context.Context) error {
	if !s.log.Durable() {
		return nil
	}
	states := map[durable.MachineID][]byte{}
	for _, n := range s.logs.nodes() {
		st, err := s.core.snapshotOf(n)
		if err != nil {
			return err
		}
		states[machineOf(n)] = st
	}
	return s.log.CreateMachines(ctx, states)
}

// recover rebuilds the core from the journal, redoes every write the
// entries replayed caused (storage may have lost writes it acknowledged
// since a checkpoint: kv defers its syncs) and reissues the I/O left
// outstanding. Storage sees again only reads and writes it saw before, or
// would have.
func (s *store) recover(ctx context.Context, n int) error {
	cps := s.log.Checkpointed()
	if st, ok := cps[legacyMachine]; ok && len(st) > 0 {
		return s.recoverEarlier(ctx, n, cps)
	}
	groups := 0
	for cps[machineOf(Node(groups))] != nil {
		groups++
	}
	front, group := frontReplay(), make([]*replaying[GroupEntry, GroupOutput, *GroupMachine], groups)
	machines := map[durable.MachineID]durable.Machine{machineOf(FrontNode): front}
	groupMachines := make([]*GroupMachine, groups)
	for g := range group {
		group[g] = groupReplay()
		machines[machineOf(Node(g))], groupMachines[g] = group[g], group[g].m
	}
	if _, err := s.log.ReplayMachines(ctx, machines); err != nil {
		return fmt.Errorf("oblivistore: %w", err)
	}
	core, err := assemble(front.m, groupMachines)
	if err == nil {
		err = s.adopt(core, n)
	}
	if err != nil {
		return err
	}
	var toGroups []ToGroup
	for _, o := range front.outs {
		if o.Msg != nil {
			toGroups = append(toGroups, *o.Msg)
		}
	}
	redo := map[ioKey]*WriteIO{}
	var toFront []ToFront
	for _, g := range group {
		for _, o := range g.outs {
			if o.Msg != nil {
				toFront = append(toFront, *o.Msg)
			}
			if o.Write != nil {
				redo[ioKey{o.Write.Group, o.Write.ID}] = o.Write
			}
		}
	}
	if err := s.deliver(toGroups, toFront, redo); err != nil {
		return err
	}
	return s.finishRecovery(ctx, redo)
}

// adopt makes core, rebuilt from the journal, the store's, checked
// against its options, and claims the fences of this open.
func (s *store) adopt(core *Core, n int) error {
	core.front.st.Front.Opts.ValueSize = s.opts.valueSize // a core driven by hand has none
	if err := core.checkOptions(s.opts, n); err != nil {
		return err
	}
	core.setHooks(s.opts, s.keys)
	s.core = core
	s.logs = newMachineLogs(s.log, core.Groups())
	s.startIncarnation()
	return nil
}

// deliver routes the messages a crash kept from their receivers
// (Core.Deliver), journaling the entries, and keeps the writes they cause
// for the redo.
func (s *store) deliver(toGroups []ToGroup, toFront []ToFront, redo map[ioKey]*WriteIO) error {
	outs, err := s.core.Deliver(toGroups, toFront)
	s.logs.append(s.core.Entries())
	lsn := s.logs.flush()
	if err == nil {
		err = s.log.Sync(lsn)
	}
	if err != nil {
		return fmt.Errorf("oblivistore: delivering the messages a crash held back: %w", err)
	}
	for _, o := range outs {
		if o.Write != nil {
			redo[ioKey{o.Write.Group, o.Write.ID}] = o.Write
		}
	}
	return nil
}

// finishRecovery claims the fences, redoes the writes in issue order and
// reissues the I/O left outstanding.
func (s *store) finishRecovery(ctx context.Context, redo map[ioKey]*WriteIO) error {
	if err := s.claimFences(ctx); err != nil {
		return err
	}
	for _, w := range s.core.Outstanding() {
		if w.Write != nil {
			redo[ioKey{w.Write.Group, w.Write.ID}] = w.Write
		}
	}
	for _, w := range sortedWrites(redo) {
		if err := s.write(ctx, w); err != nil {
			return fmt.Errorf("oblivistore: redoing write %d of group %d: %w", w.ID, w.Group, err)
		}
	}
	return s.resume(ctx)
}

// recoverEarlier recovers a store an earlier build journaled: the core's
// checkpoint and inputs as machine 0 (replay), then, once the writes are
// redone, a checkpoint of every machine and machine 0 retired, before
// anything is journaled machine by machine. A machine checkpointed by
// such an upgrade cut short is rebuilt from machine 0 again.
func (s *store) recoverEarlier(ctx context.Context, n int, cps map[durable.MachineID][]byte) error {
	r := &replay{opts: s.opts, keys: s.keys, n: n}
	machines := map[durable.MachineID]durable.Machine{legacyMachine: r}
	for m := range cps {
		if m != legacyMachine {
			machines[m] = upgradeCutShort{}
		}
	}
	if _, err := s.log.ReplayMachines(ctx, machines); err != nil {
		return fmt.Errorf("oblivistore: %w", err)
	}
	s.core = r.core
	s.logs = newMachineLogs(s.log, s.core.Groups())
	s.startIncarnation()
	if err := s.claimFences(ctx); err != nil {
		return err
	}
	for _, w := range sortedWrites(r.redo) {
		if err := s.write(ctx, w); err != nil {
			return fmt.Errorf("oblivistore: redoing write %d of group %d: %w", w.ID, w.Group, err)
		}
	}
	if err := s.checkpointAll(ctx); err != nil {
		return fmt.Errorf("oblivistore: moving an earlier build's journal to a log per machine: %w", err)
	}
	if err := s.log.Machine(legacyMachine).Retire(ctx); err != nil {
		return fmt.Errorf("oblivistore: moving an earlier build's journal to a log per machine: %w", err)
	}
	return s.resume(ctx)
}

// upgradeCutShort is a machine whose checkpoint an upgrade cut short
// wrote: machine 0 holds its state, so its own is passed over. It has no
// entries: none is journaled before machine 0 is retired.
type upgradeCutShort struct{}

func (upgradeCutShort) Restore([]byte) error { return nil }
func (upgradeCutShort) Apply([]byte) error {
	return errors.New("oblivistore: an entry of a machine an upgrade from an earlier build's journal never finished")
}
func (upgradeCutShort) Snapshot() ([]byte, error) { return nil, nil }

// replaying is a machine as its own log rebuilds it (durable.Machine):
// its checkpoint restored, then each of its entries decoded and applied.
// It keeps, for the recovery, the outputs its checkpoint left outstanding
// (outstanding, where given) and those of every entry replayed: the
// messages it sent, which a crash may have kept from their receivers,
// and a group's writes, to be redone.
type replaying[E, O any, M Machine[E, O]] struct {
	m           M
	decode      func([]byte) (E, error)
	outstanding func(M) []O
	outs        []O
}

func frontReplay() *replaying[FrontEntry, FrontOutput, *FrontMachine] {
	return &replaying[FrontEntry, FrontOutput, *FrontMachine]{m: &FrontMachine{}, decode: DecodeFrontEntry}
}

func groupReplay() *replaying[GroupEntry, GroupOutput, *GroupMachine] {
	return &replaying[GroupEntry, GroupOutput, *GroupMachine]{m: &GroupMachine{}, decode: DecodeGroupEntry,
		outstanding: (*GroupMachine).outstanding}
}

func (r *replaying[E, O, M]) Restore(b []byte) error {
	if err := r.m.Restore(b); err != nil {
		return err
	}
	r.outs = nil
	if r.outstanding != nil {
		r.outs = r.outstanding(r.m)
	}
	return nil
}

func (r *replaying[E, O, M]) Apply(record []byte) error {
	entries, err := splitEntries(record)
	if err != nil {
		return err
	}
	for _, b := range entries {
		e, err := r.decode(b)
		if err != nil {
			return err
		}
		outs, err := r.m.Apply(e)
		r.outs = append(r.outs, outs...)
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *replaying[E, O, M]) Snapshot() ([]byte, error) { return r.m.Snapshot() }
