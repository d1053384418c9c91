package auditrun

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/cloak"
	"github.com/oblivkv/oblivkv/protocol/treebeard"
)

// A protocol whose schedule storage sees is set by a clock runs here on a
// clock the run drives, so that every workload gives it the same schedule
// however loaded the machine is, and so that a schedule that depends on
// the requests shows:
//
//   - treebeard: its Routers' epochs are off the clock
//     (Options.WithEpochControl). The requests go in rounds of Clients
//     concurrent requests; once a round's requests are all in the epoch,
//     the run ends it and waits for every reply: each round is one epoch.
//   - cloak: its batches run on a clock the run ticks (Options.WithClock).
//     The requests go in rounds too; the run ticks at least once per
//     round and until every request of the round is answered, at most
//     maxRoundTicks times, then idleTicks more with no client.
//
// Every other protocol's clients run freely. No verdict depends on the
// wall clock: a run that stalls is cut off, by tick count for cloak and
// after Config.Timeout for every protocol, and reported as a failed check.
const (
	// maxRoundTicks bounds the ticks a round of Cloak requests may need:
	// a waiting key is in a batch within as many ticks as there are
	// reuse-distance sets (protocol/cloak's audit waits as long).
	maxRoundTicks = 200
	// idleTicks are the ticks after the last request: batches leave
	// whether clients ask or not, idle ones too (Cloak Sec. 4).
	idleTicks = 20
	// pollEvery is how often the run looks whether a round is ready.
	pollEvery = 100 * time.Microsecond
)

// errStalled reports a run cut off with requests unanswered.
var errStalled = errors.New("requests unanswered")

// pacing is how a run of one protocol is driven: the options that hand
// its clock to the run (nil: the protocol's own), and how the requests
// go. journal opens the store with a journal (Cloak's checkpoints are
// part of what storage sees).
type pacing struct {
	options any
	drive   func(ctx context.Context, d *driver) error
	journal bool
}

// pacingFor returns protocol's pacing with options, the protocol options
// the audit was given (nil: the defaults).
func pacingFor(protocol string, options any) (pacing, error) {
	switch protocol {
	case "treebeard":
		o, err := kv.OptionsOf[treebeard.Options](protocol, options)
		ctl := &treebeard.EpochControl{}
		return pacing{options: o.WithEpochControl(ctl), drive: func(ctx context.Context, d *driver) error {
			return d.rounds(ctx, func(ctx context.Context, n int, _ func() bool) error { return endEpoch(ctx, d, ctl, n) })
		}}, err
	case "cloak":
		o, err := kv.OptionsOf[cloak.Options](protocol, options)
		clock := make(cloak.Clock)
		return pacing{options: o.WithClock(clock), journal: true, drive: func(ctx context.Context, d *driver) error {
			if err := d.rounds(ctx, func(ctx context.Context, _ int, answered func() bool) error {
				return tickRound(ctx, d, clock, answered)
			}); err != nil {
				return err
			}
			for range idleTicks {
				d.tick(clock)
			}
			return nil
		}}, err
	}
	return pacing{options: options, drive: func(ctx context.Context, d *driver) error { return d.free(ctx) }}, nil
}

// driver issues one workload's requests to a store and keeps what the
// analyses need of them.
type driver struct {
	s        kv.Store
	log      *observe.MemoryLog
	keys     []int
	records  int
	clients  int
	reqs     []Request
	answered []bool
	// marks are the Tap sequence numbers at which the run ended an epoch
	// (treebeard) or ticked (cloak): the last call before it.
	marks []uint64
}

func newDriver(s kv.Store, log *observe.MemoryLog, keys []int, records, clients int) *driver {
	return &driver{s: s, log: log, keys: keys, records: records, clients: clients,
		reqs: make([]Request, len(keys)), answered: make([]bool, len(keys))}
}

// issue runs request i: a Get when i is even; otherwise a Put, or, for a
// key never loaded (the missing workload), a Delete, so that it never
// exists. Each i is issued by one goroutine.
func (d *driver) issue(ctx context.Context, i int) error {
	k := keyName(d.keys[i])
	d.reqs[i] = Request{Key: d.keys[i], From: d.log.LastSeq()}
	var err error
	switch {
	case i%2 == 0:
		_, _, err = d.s.Get(ctx, k)
	case d.keys[i] >= d.records:
		err = d.s.Delete(ctx, k)
	default:
		err = d.s.Put(ctx, k, []byte{byte(i), byte(i >> 8)})
	}
	d.reqs[i].To = d.log.LastSeq()
	d.answered[i] = err == nil
	if err != nil && ctx.Err() != nil {
		return errStalled // cut off: counted as unanswered
	}
	return err
}

// unanswered counts the requests not answered.
func (d *driver) unanswered() int {
	n := 0
	for _, ok := range d.answered {
		if !ok {
			n++
		}
	}
	return n
}

// free issues the requests from d.clients concurrent clients: client c
// issues requests c, c+clients, ...
func (d *driver) free(ctx context.Context) error {
	errs := make([]error, d.clients)
	var wg sync.WaitGroup
	for c := range d.clients {
		wg.Go(func() {
			for i := c; i < len(d.keys) && errs[c] == nil; i += d.clients {
				errs[c] = d.issue(ctx, i)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// rounds issues the requests in rounds of d.clients concurrent requests.
// Once a round's requests are issued, pace(ctx, n, answered) drives the
// protocol's clock until they are answered (n requests; answered reports
// whether all are); an error of pace cuts the round's requests off and
// ends the run.
func (d *driver) rounds(ctx context.Context, pace func(ctx context.Context, n int, answered func() bool) error) error {
	for from := 0; from < len(d.keys); from += d.clients {
		to := min(from+d.clients, len(d.keys))
		rctx, cancel := context.WithCancel(ctx)
		errs := make([]error, to-from)
		var left atomic.Int64
		left.Store(int64(to - from))
		var wg sync.WaitGroup
		for i := from; i < to; i++ {
			wg.Go(func() {
				errs[i-from] = d.issue(rctx, i)
				left.Add(-1)
			})
		}
		perr := pace(rctx, to-from, func() bool { return left.Load() == 0 })
		if perr != nil {
			cancel()
		}
		wg.Wait()
		cancel()
		if err := errors.Join(append(errs, perr)...); err != nil {
			return err
		}
	}
	return nil
}

// endEpoch ends a round's epoch once it holds the round's n requests,
// and waits for their replies.
func endEpoch(ctx context.Context, d *driver, ctl *treebeard.EpochControl, n int) error {
	if err := waitUntil(ctx, func() bool { return ctl.Collecting() == n }); err != nil {
		return err
	}
	d.marks = append(d.marks, d.log.LastSeq())
	ctl.End()
	return nil
}

// tickRound ticks clock once requests wait for a batch (or are all
// answered), and again until every request of the round is answered, at
// most maxRoundTicks times.
func tickRound(ctx context.Context, d *driver, clock cloak.Clock, answered func() bool) error {
	for ticks := 0; ; ticks++ {
		if err := waitUntil(ctx, func() bool { return answered() || pendingKeys(d.s) > 0 }); err != nil {
			return err
		}
		switch {
		case ticks > 0 && answered():
			return nil
		case ticks == maxRoundTicks:
			return fmt.Errorf("%w after %d ticks", errStalled, ticks)
		}
		d.tick(clock)
	}
}

// tick marks the log and ticks clock.
func (d *driver) tick(clock cloak.Clock) {
	d.marks = append(d.marks, d.log.LastSeq())
	clock.Tick()
}

// pendingKeys is how many keys wait for a Cloak batch.
func pendingKeys(s kv.Store) float64 {
	v, _ := stat(s.Stats(), "pending_keys")
	return v
}

// waitUntil polls cond until it holds or ctx ends.
func waitUntil(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", errStalled, ctx.Err())
		case <-time.After(pollEvery):
		}
	}
	return nil
}
