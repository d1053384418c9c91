package treebeard

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/oblivkv/oblivkv/internal/durable"
)

// Each Stash shard and each tree is a machine with a log of its own in
// the store's journal (durable.MachineLog), whose records describe only
// its own state: a Stash shard's, where its blocks are and what the
// stashed ones hold after each epoch, and the ends of the evictions it
// answered; a tree's, its operations' plans and Changes, the blocks its
// reads took out for the Stash shards, and the ends of its evictions. A
// machine's checkpoint is its own, taken between its own steps while the
// others go on, and recovery rebuilds each machine from its own
// checkpoint and records alone (durable.Log.ReplayMachines); what one
// machine owes another then reaches it as a message, as in service
// (recover). The Routers hold nothing durable (a request not answered
// before a crash is retried by its client, Treebeard Sec. 5.1.2): they
// have no log.
//
// The machines' names in the journal: Stash shard i is
// stashMachineBase+i, tree t treeMachineBase+t, so neither depends on how
// many of the other there are. Machine 0 is the whole store as an
// earlier build journaled it (legacyMachine).
const (
	legacyMachine    durable.MachineID = 0
	stashMachineBase durable.MachineID = 1 << 16
	treeMachineBase  durable.MachineID = 2 << 16
)

func stashMachineID(i int) durable.MachineID { return stashMachineBase + durable.MachineID(i) }
func treeMachineID(t int) durable.MachineID  { return treeMachineBase + durable.MachineID(t) }

// machineLog is one machine's log, with the checkpoint it has under way.
type machineLog struct {
	*durable.MachineLog
	log  *durable.Log
	ckpt *checkpoints
	busy atomic.Bool // a checkpoint of the machine is being written
	// again, when set, is called once a checkpoint is written if the log
	// is due again (records came meanwhile): the machine's driver takes
	// the next one at its next point between steps, even if no step of
	// its own comes, so an idle machine does not hold the journal's floor.
	again func()
}

// checkpoints are the checkpoints of a store's machines under way, and
// the first that failed.
type checkpoints struct {
	wg  sync.WaitGroup
	mu  sync.Mutex
	err error
}

func (c *checkpoints) note(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
	}
}

// wait waits for the checkpoints under way and returns the first that
// failed since the last call.
func (c *checkpoints) wait() error {
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.err
	c.err = nil
	return err
}

func newMachineLog(log *durable.Log, id durable.MachineID, ckpt *checkpoints) *machineLog {
	return &machineLog{MachineLog: log.Machine(id), log: log, ckpt: ckpt}
}

// Sync waits until every record up to lsn is durable.
func (l *machineLog) Sync(lsn uint64) error { return l.log.Sync(lsn) }

// checkpointState is a machine's checkpoint as taken between two of its
// steps, sharing no memory the machine changes, and encode encodes it.
type checkpointState interface{ encode() []byte }

// checkpointIfDue starts the machine's checkpoint when its log is due
// and none is under way: snapshot runs now, at the journal's last record,
// and the checkpoint is encoded and written while the machine and the
// others go on. The caller holds off the machine's appends while it runs
// (it is between two of the machine's steps), so the snapshot includes
// exactly its records up to that one.
func (l *machineLog) checkpointIfDue(snapshot func() checkpointState) {
	if !l.Due() || !l.busy.CompareAndSwap(false, true) {
		return
	}
	at, st := l.log.Last(), snapshot()
	l.ckpt.wg.Go(func() {
		err := l.Checkpoint(context.Background(), st.encode(), at)
		l.busy.Store(false)
		switch {
		case err != nil:
			l.ckpt.note(errors.Join(errCheckpoint, err))
		case l.again != nil && l.Due():
			l.again()
		}
	})
}

var errCheckpoint = errors.New("treebeard: a machine's checkpoint")
