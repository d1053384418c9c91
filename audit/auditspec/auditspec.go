// Package auditspec is what `oblivkv audit` needs of a protocol, carried
// by the protocol's kv.Protocol descriptor (its Audit field) as an image
// format's registration carries its decoder: the prefixes of its storage
// addresses, how an audit drives its clock, its own checks of storage's
// view and the active checks in which storage acts, and the vocabulary
// these share with the audit's runner (Run, Analysis, Check).
//
// It is a package of its own, below kv, so that kv can type the
// descriptor's field without depending on the statistics of package audit,
// whose functions make the Checks, or on the runner
// (cmd/oblivkv/internal/auditrun), which reads the registrations. kv,
// audit, every protocol and the runner import it; it imports only observe.
//
// It owns those types, the verdict of a check (Check) and the wait that a
// Clock and an active check poll with. It must never compute a statistic
// or name a protocol.
package auditspec

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/oblivkv/oblivkv/observe"
)

// Spec is a protocol's registration with the audit. Its zero value is a
// protocol with no checks of its own whose clients run freely, on its own
// clock.
type Spec struct {
	// Prefixes begin every address of the protocol's storage layout (kv's
	// metadata record and the journal's anchor are not the protocol's).
	Prefixes []string
	// Ops is the number of requests per workload of an audit at its
	// defaults (0: the runner's default).
	Ops int
	// Journal opens the store with a journal during an audit, for a
	// protocol whose checkpoints, or whose order of calls, are part of
	// what storage sees and depend on it.
	Journal bool
	// Pace, when set, hands the protocol's clock to the audit: from the
	// options the audit was given (nil: the defaults) it makes the
	// options to open the store with, under which the store's schedule
	// follows the Clock it returns, and the audit drives that Clock round
	// by round. A run then gives storage the same schedule however loaded
	// the machine is.
	Pace func(options any) (any, Clock, error)
	// Unit names the unit of storage an address belongs to, for counting
	// the calls that touch each unit when workloads are compared:
	// addresses that every call touching one touches too are one unit,
	// counted once (nil: every address is its own unit).
	Unit func(addr string) string
	// Analyse makes the protocol's own checks of one run, from storage's
	// view and the protocol's public parameters (nil: none).
	Analyse func(Run) (Analysis, error)
	// Active are checks in which storage acts, as the protocol's
	// adversary may, rather than only watches: each runs once per audit,
	// apart from the workloads.
	Active []func(ctx context.Context, a Active) (Check, error)
	// Plots title the histograms of Analysis.Plots, by name.
	Plots map[string]Plot
}

// Clock is a protocol's schedule in an audit's hands. The audit issues
// the requests in rounds of concurrent requests; once a round's are
// issued it calls Round, and after the last round Finish.
type Clock interface {
	// Round drives the clock until the round's requests are answered. It
	// returns an error wrapping ErrStalled when they cannot be: the
	// audit then cuts them off and reports them unanswered.
	Round(ctx context.Context, r Round) error
	// Finish drives the clock once the last round is answered.
	Finish(r Round)
}

// Round is what a Clock sees of a round of requests.
type Round struct {
	// Requests is the number of requests of the round.
	Requests int
	// Answered reports whether every request of the round is answered.
	Answered func() bool
	// Stat returns a statistic the store reports now (kv.Stats.Extra by
	// name; 0 when it reports none of that name).
	Stat func(name string) float64
	// Mark records, in Run.Marks, that the clock is about to move.
	Mark func()
}

// Run is what an audit gives a protocol's analysis of one workload's run:
// what storage saw, and the public parameters. It never says which key a
// request was for.
type Run struct {
	Protocol string
	// Workload names the run's workload: zipf, uniform, hotkey (key 0
	// every time), missing (a key never loaded) or bursts.
	Workload string
	// Options are the protocol options the audit was given (nil: the
	// defaults), as kv.Config.Options takes them.
	Options any
	// Capacity is the store's capacity, which is also the number of keys
	// loaded.
	Capacity int
	// All is every Tap record from the store's creation; Records those
	// after the bulk load; Closing is how many of All came before the
	// store's Close.
	All, Records []observe.Record
	Closing      int
	// Requests is the number of requests issued; Unanswered of them were
	// not answered when the run was cut off.
	Requests, Unanswered int
	// Marks are the Tap sequence numbers of the last call before each
	// Round.Mark.
	Marks []uint64
	// Stats are the protocol's statistics (kv.Stats.Extra) after the
	// requests, by name.
	Stats map[string]float64
}

// Stat returns the statistic name of the run's store.
func (r Run) Stat(name string) (float64, error) {
	v, ok := r.Stats[name]
	if !ok {
		return 0, fmt.Errorf("%s reports no statistic %q", r.Protocol, name)
	}
	return v, nil
}

// Analysis is a protocol's own checks of one run, with the histograms it
// plots and those it compares across workloads.
type Analysis struct {
	Checks []Check
	// Plots are histograms to draw, by a name Spec.Plots titles.
	Plots map[string][]int
	// Compared are observables that must not depend on the workload,
	// by name: the audit tests each workload's histogram against the
	// reference workload's.
	Compared map[string][]int
}

// Active is what an active check knows of the audit.
type Active struct {
	Protocol string
	// Options are the protocol options the audit was given (nil: the
	// defaults).
	Options  any
	Capacity int
	// Timeout bounds the check's requests.
	Timeout time.Duration
}

// Plot titles a histogram: its title, and what its bars count.
type Plot struct{ Title, YLabel string }

// ErrStalled reports requests that were not answered: a round whose
// clock cannot make them progress, or a wait cut off.
var ErrStalled = errors.New("requests unanswered")

// pollEvery is how often WaitUntil looks whether its condition holds.
const pollEvery = 100 * time.Microsecond

// WaitUntil polls cond until it holds, or returns an error wrapping
// ErrStalled once ctx ends.
func WaitUntil(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrStalled, ctx.Err())
		case <-time.After(pollEvery):
		}
	}
	return nil
}
