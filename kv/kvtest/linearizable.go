package kvtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/oblivkv/oblivkv/kv"
)

// LinOptions tune a linearizability check. The zero value is the default.
type LinOptions struct {
	// Clients is the number of concurrent clients (default 8).
	Clients int
	// OpsPerClient is the number of operations each client issues
	// (default 200).
	OpsPerClient int
	// Keys is the number of keys besides the hot key (default 4).
	Keys int
	// HotFraction is the share of operations on the hot key (default 0.5),
	// so that operations overlap on one key.
	HotFraction float64
	// GetFraction and DeleteFraction are the shares of Gets and Deletes
	// (defaults 0.5 and 0.1); the rest are Puts, each of a unique value.
	GetFraction, DeleteFraction float64
	// MutationFraction is the share of the Puts that are kv mutations
	// instead (default none): increments, appends and sets if missing
	// (Redis's INCR, APPEND and SETNX) in equal parts, run by kv.Update.
	// Puts then write unique integers, so increments find numbers and, after
	// an append, values that are not.
	MutationFraction float64
	// RESPResults compares of a mutation's result only what a Redis reply
	// shows, for a store reached over RESP: INCRBY's new value, APPEND's
	// new length, SETNX's whether it set, or the error that rejected it.
	RESPResults bool
	// Seed makes the operation mix reproducible; 0 picks a random seed
	// (CheckLinearizable: the test's Seed, which OBLIVKV_TEST_SEED fixes),
	// which is logged (the interleaving is up to the scheduler).
	Seed uint64
	// Timeout bounds the porcupine check (default 60s); a check that times
	// out is reported as inconclusive, which fails CheckLinearizable.
	Timeout time.Duration
	// AllowErrors accepts operations that return errors (fault injection):
	// an errored Get is dropped from the history, and an errored write
	// may or may not have taken effect, at any time after its call until
	// FailedBy's bound (if given) or ever (narrowed exactly for Puts, see
	// boundFailedPuts). By default any error fails the check.
	AllowErrors bool
	// FailedBy, with AllowErrors, bounds when a failed Put, Delete or
	// mutation can have taken effect: by FailedBy(t) for one that failed
	// at t, when that is known after the run (zero: not known, the
	// operation stays open-ended). A test that kills the store gives the
	// moment the next process served, for an operation cut off by a kill
	// took effect, if at all, before the process that had it died. Without
	// it, every failed operation stays concurrent with all that follow it,
	// and the check's search doubles with each one a key keeps pending.
	FailedBy func(failed time.Time) time.Time
	// KeyPrefix starts every key of the check (default "lin/").
	KeyPrefix string
	// Until, if set, replaces OpsPerClient: each client issues operations
	// until it returns true (it is asked before every operation).
	Until func() bool
	// FinalReads makes each client end with a Get of every key, so the
	// history checks what the store holds at the end.
	FinalReads bool
	// Pause is how long each client waits after each operation (default
	// none): with Until, it bounds the history of a fast store.
	Pause     time.Duration
	valueSize int // the store's

	// VisualizationDir receives the HTML visualization of a failed check
	// (default os.TempDir()).
	VisualizationDir string
}

func (o LinOptions) withDefaults() LinOptions {
	o.Clients = cmp.Or(o.Clients, 8)
	o.OpsPerClient = cmp.Or(o.OpsPerClient, 200)
	o.Keys = cmp.Or(o.Keys, 4)
	o.HotFraction = cmp.Or(o.HotFraction, 0.5)
	o.GetFraction = cmp.Or(o.GetFraction, 0.5)
	o.DeleteFraction = cmp.Or(o.DeleteFraction, 0.1)
	if o.Seed == 0 {
		o.Seed = rand.Uint64() | 1
	}
	o.Timeout = cmp.Or(o.Timeout, 60*time.Second)
	o.KeyPrefix = cmp.Or(o.KeyPrefix, "lin/")
	return o
}

// ErrNotApplied marks an error of an operation that certainly had no
// effect (a request never sent: its connection was refused, say). Such an
// operation is left out of the history, as if never issued.
var ErrNotApplied = errors.New("operation not applied")

// LinResult is the outcome of a linearizability check.
type LinResult struct {
	// Result is porcupine's verdict: Ok, Illegal or Unknown (timed out).
	Result porcupine.CheckResult
	// Seed is the seed of the operation mix, to reproduce it.
	Seed uint64
	// Ops is the number of operations in the checked history; Errors the
	// number of operations that returned an error.
	Ops, Errors int
	// FirstErr is the first error an operation returned.
	FirstErr error
	// Visualization is the path of the HTML visualization written when the
	// history is not linearizable.
	Visualization string
	// History is the recorded history, as checked.
	History []porcupine.Operation
}

// CheckLinearizable runs concurrent clients against s and fails t unless
// the recorded history is linearizable per key. On failure it writes
// porcupine's visualization and reports its path.
func CheckLinearizable(t *testing.T, s kv.Store, opts LinOptions) {
	t.Helper()
	if opts.Seed == 0 {
		opts.Seed = Seed(t)
	}
	r, err := Linearizable(t.Context(), s, opts)
	if err != nil {
		t.Fatalf("linearizability check (seed %d): %v", r.Seed, err)
	}
	switch r.Result {
	case porcupine.Ok:
		t.Logf("linearizable: %d operations (%d errored), seed %d", r.Ops, r.Errors, r.Seed)
	case porcupine.Illegal:
		t.Errorf("history of %d operations is NOT linearizable (seed %d); visualization: %s", r.Ops, r.Seed, r.Visualization)
	default:
		t.Errorf("linearizability check of %d operations inconclusive: porcupine timed out (seed %d)", r.Ops, r.Seed)
	}
}

// Linearizable runs concurrent clients against s, records the history and
// checks it with porcupine. It returns an error, with the partial result,
// when the store could not be exercised (an operation failed and
// opts.AllowErrors is false, or writing the visualization failed).
func Linearizable(ctx context.Context, s kv.Store, opts LinOptions) (LinResult, error) {
	opts = opts.withDefaults()
	opts.valueSize = s.Stats().ValueSize
	res := LinResult{Seed: opts.Seed}
	if opts.MutationFraction > 0 && opts.valueSize <= 0 {
		// The model would judge every SETNX and APPEND too large, and call
		// a correct store's history illegal.
		return res, errors.New("the store reports no value size (Stats().ValueSize is 0): mutations cannot be modelled")
	}
	keys := make([]string, opts.Keys+1)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%d", opts.KeyPrefix, i) // keys[0] is hot
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var (
		mu      sync.Mutex
		history []porcupine.Operation
	)
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	var wg sync.WaitGroup
	for c := range opts.Clients {
		r := rand.New(rand.NewPCG(opts.Seed, uint64(c)))
		wg.Go(func() {
			ops := make([]porcupine.Operation, 0, opts.OpsPerClient)
			defer func() {
				mu.Lock()
				history = append(history, ops...)
				mu.Unlock()
			}()
			// do runs one operation and records it; false stops the client.
			do := func(in linInput) bool {
				if ctx.Err() != nil {
					return false
				}
				call := now()
				out, err := apply(ctx, s, in)
				ret := now()
				if errors.Is(err, ErrNotApplied) {
					return true
				}
				if err != nil {
					mu.Lock()
					res.Errors++
					if res.FirstErr == nil {
						res.FirstErr = fmt.Errorf("client %d: %s: %w", c, in, err)
					}
					mu.Unlock()
					if !opts.AllowErrors {
						cancel()
						return false
					}
					if in.Op == opGet {
						return true // observed nothing
					}
					// It may have taken effect at any time after its call
					// (see FailedBy and boundFailedPuts); ret is when it
					// failed until the run ends.
					out = linOutput{Failed: true}
				}
				ops = append(ops, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
				return true
			}
			for i := 0; !opts.done(i); i++ {
				if !do(opts.nextInput(r, keys, c, i)) {
					return
				}
				time.Sleep(opts.Pause)
			}
			for _, k := range keys {
				if opts.FinalReads && !do(linInput{Op: opGet, Key: k}) {
					return
				}
			}
		})
	}
	wg.Wait()
	res.Ops, res.History = len(history), history
	if res.FirstErr != nil && !opts.AllowErrors {
		return res, fmt.Errorf("an operation failed (set LinOptions.AllowErrors to model failures): %w", res.FirstErr)
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	history = boundFailed(history, start, opts.FailedBy)
	history = boundFailedPuts(history)
	res.Ops, res.History = len(history), history
	res.Result = porcupine.CheckOperationsTimeout(kvModel, history, opts.Timeout)
	if res.Result != porcupine.Illegal {
		return res, nil
	}
	var err error
	res.Visualization, err = visualize(history, opts)
	return res, err
}

// done reports whether a client has issued all its operations but the
// final reads, i of them so far.
func (o LinOptions) done(i int) bool {
	if o.Until != nil {
		return o.Until()
	}
	return i >= o.OpsPerClient
}

// nextInput draws client c's i-th operation: on the hot key keys[0] with
// probability HotFraction, else on another; a Put writes a value no other
// operation writes.
func (o LinOptions) nextInput(r *rand.Rand, keys []string, c, i int) linInput {
	in := linInput{Key: keys[0]}
	if r.Float64() >= o.HotFraction {
		in.Key = keys[1+r.IntN(o.Keys)]
	}
	switch p := r.Float64(); {
	case p < o.GetFraction:
		in.Op = opGet
	case p < o.GetFraction+o.DeleteFraction:
		in.Op = opDelete
	case p < o.GetFraction+o.DeleteFraction+(1-o.GetFraction-o.DeleteFraction)*(1-o.MutationFraction):
		in.Op, in.Value = opPut, o.uniqueValue(c, i)
	default:
		in.Op, in.ValueSize, in.RESP = opMutate, o.valueSize, o.RESPResults
		in.Mutation = []kv.MutationOp{kv.MutIncrBy, kv.MutAppend, kv.MutSet}[r.IntN(3)]
		in.Value = map[kv.MutationOp]string{kv.MutIncrBy: "1", kv.MutAppend: "x", kv.MutSet: o.uniqueValue(c, i)}[in.Mutation]
	}
	return in
}

// uniqueValue is the value of client c's i-th write, which no other write
// writes: an integer when the check runs mutations.
func (o LinOptions) uniqueValue(c, i int) string {
	if o.MutationFraction > 0 {
		return fmt.Sprint(1_000_000*(c+1) + 1000*i)
	}
	return fmt.Sprintf("c%d.%d", c, i)
}

// apply runs one operation on s.
func apply(ctx context.Context, s kv.Store, in linInput) (out linOutput, err error) {
	switch in.Op {
	case opGet:
		var v []byte
		v, out.Exists, err = s.Get(ctx, in.Key)
		out.Value = string(v)
	case opPut:
		err = s.Put(ctx, in.Key, []byte(in.Value))
	case opDelete:
		err = s.Delete(ctx, in.Key)
	case opMutate:
		var r kv.Result
		r, err = kv.Update(ctx, s, in.Key, in.mutation())
		out = in.output(r, err)
		if out.Rejected != "" {
			err = nil
		}
	}
	return out, err
}

// resultOutput is the output of a mutation: its result, or the kv error
// that rejected it (an outcome the model predicts, not a failure).
func resultOutput(r kv.Result, err error) linOutput {
	if rj := kv.RejectionOf(err); rj != 0 {
		return linOutput{Rejected: rj.Err().Error()}
	}
	return linOutput{Value: string(r.New), Exists: r.Found, Written: r.Written, Len: r.Len}
}

// visualize checks an illegal history again, verbosely, and writes
// porcupine's visualization of it to a new file in VisualizationDir,
// whose path it returns.
func visualize(history []porcupine.Operation, opts LinOptions) (string, error) {
	_, info := porcupine.CheckOperationsVerbose(kvModel, history, opts.Timeout)
	f, err := os.CreateTemp(opts.VisualizationDir, "oblivkv-linearizability-*.html")
	if err != nil {
		return "", fmt.Errorf("writing the visualization: %w", err)
	}
	defer f.Close()
	if err := porcupine.Visualize(kvModel, info, f); err != nil {
		return f.Name(), fmt.Errorf("writing the visualization: %w", err)
	}
	return f.Name(), f.Close()
}

// boundFailed gives each failed operation the latest moment it can have
// taken effect: FailedBy of the moment it failed (its Return until now),
// or never (math.MaxInt64) when that is unknown.
func boundFailed(history []porcupine.Operation, start time.Time, failedBy func(time.Time) time.Time) []porcupine.Operation {
	for i, op := range history {
		if !op.Output.(linOutput).Failed {
			continue
		}
		by := time.Time{}
		if failedBy != nil {
			by = failedBy(start.Add(time.Duration(op.Return)))
		}
		if by.IsZero() {
			history[i].Return = math.MaxInt64
		} else {
			history[i].Return = max(int64(by.Sub(start)), op.Call)
		}
	}
	return history
}

// boundFailedPuts narrows the failed Puts of a history, which boundFailed
// left returning when FailedBy says or never (they may have taken effect
// at any time until then), using
// the uniqueness of Put values. This keeps the check fast, since every
// operation pending forever multiplies porcupine's search, and it is exact:
//
//   - a failed Put whose value no Get returned is dropped: if it took effect,
//     no Get saw it before the next write, so removing it from a valid
//     linearization leaves one, and conversely it can always be linearized
//     last, as if it never happened;
//   - a failed Put whose value a Get returned took effect before that Get
//     linearized, so before the Get returned: its return time becomes the
//     earliest return of a Get that saw it, which excludes no linearization.
//
// Failed Deletes keep their unbounded return time: the absence they cause is
// not attributable to one operation.
func boundFailedPuts(history []porcupine.Operation) []porcupine.Operation {
	seen := map[string]int64{} // value -> earliest return of a Get that saw it
	mutated := map[string]bool{}
	for _, op := range history {
		in, out := op.Input.(linInput), op.Output.(linOutput)
		mutated[in.Key] = mutated[in.Key] || in.Op == opMutate
		if in.Op == opGet && out.Exists {
			if r, ok := seen[out.Value]; !ok || op.Return < r {
				seen[out.Value] = op.Return
			}
		}
	}
	kept := history[:0]
	for _, op := range history {
		in, out := op.Input.(linInput), op.Output.(linOutput)
		if in.Op == opPut && out.Failed {
			r, ok := seen[in.Value]
			switch {
			case ok:
				op.Return = min(op.Return, max(r, op.Call))
			case !mutated[in.Key]:
				continue
			}
		}
		kept = append(kept, op)
	}
	return kept
}

type opKind uint8

const (
	opGet opKind = iota
	opPut
	opDelete
	opMutate
)

type linInput struct {
	Op         opKind
	Key, Value string
	// Mutation is the kind of an opMutate; Value its argument; ValueSize
	// the store's, which bounds what it makes.
	Mutation  kv.MutationOp
	ValueSize int
	RESP      bool // LinOptions.RESPResults
}

// output is what the check compares of a mutation's result
// (resultOutput), or of what a Redis reply shows of it (RESP).
func (in linInput) output(r kv.Result, err error) linOutput {
	out := resultOutput(r, err)
	switch {
	case !in.RESP || out.Rejected != "":
		return out
	case in.Mutation == kv.MutIncrBy:
		return linOutput{Value: out.Value}
	case in.Mutation == kv.MutAppend:
		return linOutput{Len: out.Len}
	}
	return linOutput{Written: out.Written} // SETNX
}

// mutation returns the kv.Mutation of an opMutate.
func (in linInput) mutation() kv.Mutation {
	m := kv.Mutation{Op: in.Mutation, Arg: []byte(in.Value)}
	if m.Op == kv.MutSet {
		m.If = kv.IfMissing
	}
	return m
}

func (in linInput) String() string {
	switch in.Op {
	case opGet:
		return fmt.Sprintf("get(%q)", in.Key)
	case opPut:
		return fmt.Sprintf("put(%q, %q)", in.Key, in.Value)
	case opMutate:
		name := map[kv.MutationOp]string{kv.MutIncrBy: "incrby", kv.MutAppend: "append", kv.MutSet: "setnx"}[in.Mutation]
		return fmt.Sprintf("%s(%q, %q)", name, in.Key, in.Value)
	}
	return fmt.Sprintf("delete(%q)", in.Key)
}

type linOutput struct {
	Value   string // for a Get; a mutation's Result.New
	Exists  bool   // for a Get; a mutation's Result.Found
	Written bool   // a mutation's Result.Written
	Len     int    // a mutation's Result.Len
	// Rejected is the error of a mutation that did not apply to the value
	// (not an integer, past the value size).
	Rejected string
	Failed   bool // a write that returned an error
}

// linState is the model's state of one key (the history is partitioned by
// key): its value, if it exists.
type linState struct {
	Value  string
	Exists bool
}

// kvModel is the model of a key-value store. A failed write may or may
// not have taken effect: its step has both outcomes, so the model is
// nondeterministic (porcupine's power-set construction merges equal
// states).
var kvModel = (&porcupine.NondeterministicModel{
	Partition: byKey,
	Init:      func() []any { return []any{linState{}} },
	Step: func(state, input, output any) []any {
		st, in, out := state.(linState), input.(linInput), output.(linOutput)
		next, ok := step(st, in, out)
		switch {
		case out.Failed:
			return []any{st, next}
		case ok:
			return []any{next}
		}
		return nil
	},
	DescribeOperation: describe,
	DescribeState:     describeState,
}).ToModel()

// byKey partitions a history by key, in key order.
func byKey(history []porcupine.Operation) [][]porcupine.Operation {
	ops := map[string][]porcupine.Operation{}
	for _, op := range history {
		k := op.Input.(linInput).Key
		ops[k] = append(ops[k], op)
	}
	keys := make([]string, 0, len(ops))
	for k := range ops {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		out = append(out, ops[k])
	}
	return out
}

// step applies in to st: the next state, and whether out is what the
// store should have answered (a failed write answers nothing).
func step(st linState, in linInput, out linOutput) (linState, bool) {
	switch in.Op {
	case opGet:
		return st, out.Exists == st.Exists && out.Value == st.Value
	case opPut:
		return linState{Value: in.Value, Exists: true}, true
	case opMutate:
		next, exists, r, err := in.mutation().Apply([]byte(st.Value), st.Exists, in.ValueSize)
		return linState{Value: string(next), Exists: exists}, out.Failed || in.output(r, err) == out
	}
	return linState{}, true
}

// describe shows an operation in a visualization.
func describe(input, output any) string {
	in, out := input.(linInput), output.(linOutput)
	switch {
	case out.Failed:
		return in.String() + " -> error (outcome unknown)"
	case in.Op == opMutate:
		return fmt.Sprintf("%s -> %+v", in, out)
	case in.Op != opGet:
		return in.String()
	case !out.Exists:
		return in.String() + " -> missing"
	}
	return fmt.Sprintf("%s -> %q", in, out.Value)
}

// describeState shows a key's state in a visualization.
func describeState(state any) string {
	st := state.(linState)
	if !st.Exists {
		return "missing"
	}
	return fmt.Sprintf("%q", st.Value)
}
