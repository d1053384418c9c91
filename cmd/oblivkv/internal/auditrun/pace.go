package auditrun

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/oblivkv/oblivkv/audit/auditspec"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/observe"
)

// A protocol whose schedule storage sees is set by a clock hands that
// clock to the run (auditspec.Spec.Pace), so that every workload gives it
// the same schedule however loaded the machine is, and so that a
// schedule that depends on the requests shows: the requests go in rounds
// of Clients concurrent requests, and once a round's are issued the
// protocol's Clock drives its schedule until they are answered (ending
// an epoch, ticking a batch clock), marking the log each time it moves.
//
// Every other protocol's clients run freely. No verdict depends on the
// wall clock: a run that stalls is cut off, by the Clock or after
// Config.Timeout for every protocol, and reported as a failed check.

// pacing is how a run of one protocol is driven: the options to open its
// store with, the clock the run drives (nil: the clients run freely),
// and whether the store is journaled (its checkpoints being part of what
// storage sees).
type pacing struct {
	options any
	clock   auditspec.Clock
	journal bool
}

// pacingFor returns protocol's pacing with options, the protocol options
// the audit was given (nil: the defaults).
func pacingFor(protocol string, options any) (pacing, error) {
	spec := specOf(protocol)
	p := pacing{options: options, journal: spec.Journal}
	if spec.Pace == nil {
		return p, nil
	}
	var err error
	p.options, p.clock, err = spec.Pace(options)
	return p, err
}

// drive issues d's requests as p says.
func (p pacing) drive(ctx context.Context, d *driver) error {
	if p.clock == nil {
		return d.free(ctx)
	}
	if err := d.rounds(ctx, p.clock); err != nil {
		return err
	}
	p.clock.Finish(d.round(0, func() bool { return true }))
	return nil
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
	// marks are the Tap sequence numbers at which the protocol's clock
	// moved: the last call before it.
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
		return auditspec.ErrStalled // cut off: counted as unanswered
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
// Once a round's requests are issued, clock drives the protocol until
// they are answered; its error cuts the round's requests off and ends
// the run.
func (d *driver) rounds(ctx context.Context, clock auditspec.Clock) error {
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
		perr := clock.Round(rctx, d.round(to-from, func() bool { return left.Load() == 0 }))
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

// round is what a Clock sees of a round of n requests, answered
// reporting whether all are answered.
func (d *driver) round(n int, answered func() bool) auditspec.Round {
	return auditspec.Round{Requests: n, Answered: answered, Mark: d.mark,
		Stat: func(name string) float64 { return extras(d.s.Stats())[name] }}
}

// mark records that the clock is about to move: the log's last call.
func (d *driver) mark() { d.marks = append(d.marks, d.log.LastSeq()) }
