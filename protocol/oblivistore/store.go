package oblivistore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/random"
	"github.com/oblivkv/oblivkv/seal"
)

func init() {
	kv.Register(kv.Protocol{
		Name:    "oblivistore",
		Summary: "ObliviStore: partition ORAM with background shuffling and oblivious scheduling; hides which key is accessed from an active adversary",
		Open:    kv.FactoryOf(open),
		Options: Options{},
		Audit:   auditSpec,
		Reseal:  newResealer,
	})
}

// SlotPrefix begins every slot's storage address: SlotPrefix p/l/s.
const SlotPrefix = "os/"

// FencePrefix begins the storage address of each partition group's
// fencing token (backend.Fence), outside SlotPrefix.
const FencePrefix = backend.FenceKeyPrefix + "oblivistore/"

// checkpointEvery is how many of a machine's journal records (its
// entries of a step, or of successive steps: machineLogs.append) its
// checkpoint replaces. Records are small and the Front's checkpoint
// holds the position map, so they are spaced further apart than
// durable's default.
const checkpointEvery = 20_000

// call is a client request waiting for its reply.
type call struct {
	req   Request
	reply chan result
}

type result struct {
	kv.Result
	err error
}

// event is one input for the loop: a call, an I/O completion, or a
// function to run on the loop (Load).
type event struct {
	call  *call
	in    Input
	fatal error // storage was tampered with
	run   func()
}

// store is the driver: it owns the core, the journal, the backend I/O and
// the goroutines, and feeds the core its inputs one at a time.
type store struct {
	b         backend.Backend
	keys      *seal.Keys
	valueSize int
	log       *durable.Log
	logs      *machineLogs // its machines' logs in it (journal.go)
	core      *Core        // owned by loop once it runs
	// incarnation is the one this open runs as (startIncarnation): its
	// messages' ids and its writes' fencing tokens carry it.
	incarnation uint64

	events  chan event
	closing chan struct{} // closed by Close: the loop ends once settled
	done    chan struct{} // closed when the loop has ended

	calls  map[uint64]*call // by sequence number; loop only
	serial []event          // completions queued under TestingKnobs.SerialIO; loop only
	broken error            // loop only
	ios    sync.WaitGroup   // backend calls in flight

	opts  Options
	stats atomic.Pointer[kv.Stats]
}

func open(ctx context.Context, env kv.Env) (*store, error) {
	opts, err := kv.ResolveOptions[Options]("oblivistore", env)
	if err != nil {
		return nil, err
	}
	if opts.TestingKnobs.Leak, err = envLeak(opts.TestingKnobs.Leak); err != nil { // a leak only in oblivkv_leaks builds (leak.go)
		return nil, err
	}
	opts.valueSize = env.ValueSize
	s := &store{b: env.Backend, keys: env.Keys, valueSize: env.ValueSize,
		log:    durable.New(env.Journal, env.Backend, env.Keys),
		events: make(chan event, 1024), closing: make(chan struct{}), done: make(chan struct{}),
		calls: map[uint64]*call{}, opts: opts}
	s.log.SetEvery(checkpointEvery)
	if env.Fresh {
		seed, err := seedOf(opts)
		if err != nil {
			return nil, err
		}
		s.core = NewCore(env.Capacity, opts, seed)
		s.core.setHooks(opts, env.Keys)
		s.logs = newMachineLogs(s.log, s.core.Groups())
		s.startIncarnation()
		if err := s.claimFences(ctx); err != nil {
			return nil, err
		}
		if err := s.create(ctx); err != nil {
			return nil, err
		}
	} else if err := s.recover(ctx, env.Capacity); err != nil {
		return nil, err
	}
	fresh, err := seedOf(opts)
	if err != nil {
		return nil, err
	}
	if err := s.input(ctx, Input{Reseed: &Reseed{Seed: fresh, Incarnation: s.incarnation}}); err != nil {
		return nil, err
	}
	s.publish()
	go s.loop()
	return s, nil
}

// seedOf is a fresh random seed, or the tests' fixed one.
func seedOf(o Options) (random.Seed, error) {
	seed, err := random.Root(o.TestingKnobs.Seed)
	if err != nil {
		return seed, fmt.Errorf("oblivistore: %w", err)
	}
	if o.TestingKnobs.Leak == leakFixedSeed {
		seed = random.Seed{}
	}
	return seed, nil
}

// startIncarnation sets the incarnation this open runs as, before its
// first storage write: the journal's (durable.Log.Incarnation, grown at
// every open), and never less than one more than the last the core's
// machines started (a store without a journal has none).
func (s *store) startIncarnation() {
	s.incarnation = max(s.core.Incarnation()+1, s.log.Incarnation())
}

// JournalsEveryWrite reports that recovery rebuilds and redoes every
// write since the last checkpoint (kv.WriteJournaler): the journal holds
// the inputs that determine them.
func (s *store) JournalsEveryWrite() bool { return s.log.Durable() }

// input applies one input before the loop runs, journals the entries
// each machine applied, and issues its outputs synchronously.
func (s *store) input(ctx context.Context, in Input) error {
	outs, err := s.core.Step(in)
	s.logs.append(s.core.Entries())
	lsn := s.logs.flush()
	if err == nil {
		err = s.log.Sync(lsn)
	}
	if err != nil {
		return err
	}
	for _, o := range outs {
		s.release(o)
	}
	return nil
}

// replay is the durable.Machine that recovers the core of a store an
// earlier build journaled (recoverEarlier): the core of the checkpoint,
// stepped again through each input journaled after it. It keeps every
// write the core asked for since the checkpoint, outstanding in it or
// output by an input replayed, for the recovery to issue again.
type replay struct {
	opts Options
	keys *seal.Keys
	n    int // the store's capacity
	core *Core
	redo map[ioKey]*WriteIO
}

// ioKey names a backend call: its group and the group's ID for it.
type ioKey struct {
	Group int32
	ID    uint64
}

// Restore implements durable.Machine: it restores the core of a
// checkpoint, checked against the store's options.
func (r *replay) Restore(snapshot []byte) error {
	core, err := Restore(snapshot)
	if err != nil {
		return err
	}
	core.front.st.Front.Opts.ValueSize = r.opts.valueSize // a core driven by hand has none
	if err := core.checkOptions(r.opts, r.n); err != nil {
		return err
	}
	core.setHooks(r.opts, r.keys)
	r.core, r.redo = core, map[ioKey]*WriteIO{}
	r.keepWrites(core.Outstanding())
	return nil
}

// Apply implements durable.Machine: it steps the core through a
// journaled input.
func (r *replay) Apply(record []byte) error {
	in, err := decodeInput(record)
	if err != nil {
		return err
	}
	outs, err := r.core.Step(in)
	if err != nil {
		return err
	}
	r.keepWrites(outs)
	return nil
}

// Snapshot implements durable.Machine: the core's.
func (r *replay) Snapshot() ([]byte, error) { return r.core.Snapshot() }

// keepWrites keeps the writes among outs for recover.
func (r *replay) keepWrites(outs []Output) {
	for _, o := range outs {
		if o.Write != nil {
			r.redo[ioKey{o.Write.Group, o.Write.ID}] = o.Write
		}
	}
}

// resume completes the writes just redone and reissues the reads left
// outstanding, journaling their results like any others.
func (s *store) resume(ctx context.Context) error {
	for _, o := range s.core.Outstanding() {
		var in Input
		switch {
		case o.Write != nil:
			in.Write = &WriteDone{Group: o.Write.Group, ID: o.Write.ID}
		default:
			blocks, err := s.read(ctx, o.Read)
			if err != nil {
				return err
			}
			in.Read = &ReadDone{Group: o.Read.Group, ID: o.Read.ID, Blocks: blocks}
		}
		if err := s.input(ctx, in); err != nil {
			return err
		}
	}
	return nil
}

// loop feeds the core: it takes every event waiting, journals and applies
// them, waits for the journal (one fsync for all of them), then lets
// their outputs out. Once Close is called it ends as soon as the core is
// idle (or broken).
func (s *store) loop() {
	defer close(s.done)
	var batch []event
	var outs []Output
	closing := s.closing
	for {
		if closing == nil && (s.broken != nil || s.core.Idle()) {
			return
		}
		if len(s.serial) > 0 {
			batch, s.serial = append(batch[:0], s.serial...), s.serial[:0]
			outs = s.step(batch, outs)
			continue
		}
		select {
		case ev := <-s.events:
			batch = append(batch[:0], ev)
		case <-closing:
			closing = nil
			continue
		}
	drain:
		for len(batch) < cap(s.events) {
			select {
			case ev := <-s.events:
				batch = append(batch, ev)
			default:
				break drain
			}
		}
		outs = s.step(batch, outs)
	}
}

// step applies a batch, lets its outputs out and starts the checkpoints
// due.
func (s *store) step(batch []event, outs []Output) []Output {
	outs = s.apply(batch, outs[:0])
	for _, o := range outs {
		s.release(o)
	}
	if s.broken == nil {
		if err := s.checkpointDue(); err != nil {
			s.fail(fmt.Errorf("oblivistore: %w", err))
		}
	}
	s.publish()
	return outs
}

// apply steps a batch of events, journals the entries each machine
// applied, and returns their outputs once the journal holds them all.
func (s *store) apply(batch []event, outs []Output) []Output {
	for _, ev := range batch {
		switch {
		case ev.run != nil:
			s.logs.flush() // before what run may checkpoint
			ev.run()
			continue
		case ev.fatal != nil:
			s.fail(ev.fatal)
			continue
		case s.broken != nil:
			if ev.call != nil {
				ev.call.reply <- result{err: s.broken}
			}
			continue
		}
		if ev.call != nil {
			s.calls[s.core.NextSeq()] = ev.call
		}
		o, err := s.core.Step(ev.in)
		s.logs.append(s.core.Entries())
		if err != nil {
			s.logs.flush()
			s.fail(err)
			return outs[:0]
		}
		outs = append(outs, o...)
	}
	if err := s.log.Sync(s.logs.flush()); err != nil {
		s.fail(fmt.Errorf("oblivistore: journal: %w", err))
		return outs[:0]
	}
	return outs
}

// fail makes the store refuse everything from now on and fails every
// waiting call: the state can no longer be trusted or made durable.
func (s *store) fail(err error) {
	if s.broken == nil {
		s.broken = s.explain(err)
	}
	for seq, c := range s.calls {
		c.reply <- result{err: s.broken}
		delete(s.calls, seq)
	}
}

// release lets one output out: a backend call on its own goroutine, or a
// reply.
func (s *store) release(o Output) {
	switch {
	case o.Reply != nil:
		c := s.calls[o.Reply.Seq]
		if c == nil {
			return // a request from before a crash: nobody waits for it
		}
		delete(s.calls, o.Reply.Seq)
		c.reply <- s.resultOf(o.Reply)
	case o.Read != nil:
		s.issue(func() event {
			blocks, err := s.read(context.Background(), o.Read)
			return event{in: Input{Read: &ReadDone{Group: o.Read.Group, ID: o.Read.ID, Blocks: blocks}}, fatal: err}
		})
	case o.Write != nil:
		s.issue(func() event {
			ctx := context.Background()
			err := s.retry(ctx, func() error { return s.write(ctx, o.Write) })
			return event{in: Input{Write: &WriteDone{Group: o.Write.Group, ID: o.Write.ID}}, fatal: err}
		})
	}
}

// issue runs a backend call on its own goroutine and hands its completion
// to the loop; under TestingKnobs.SerialIO it runs it at once and queues the
// completion for the loop's next batch.
func (s *store) issue(call func() event) {
	if s.opts.TestingKnobs.SerialIO {
		s.serial = append(s.serial, call())
		return
	}
	s.ios.Add(1)
	go func() {
		defer s.ios.Done()
		s.send(call())
	}()
}

// send hands the loop an event, unless it has ended.
func (s *store) send(ev event) bool {
	select {
	case s.events <- ev:
		return true
	case <-s.done:
		return false
	}
}

func (s *store) resultOf(r *Reply) result {
	if r.Full {
		return result{err: fmt.Errorf("%w: no room for a new key", kv.ErrFull)}
	}
	if err := r.Rejected.Err(); err != nil {
		return result{err: err}
	}
	return result{Result: r.Result}
}

// retry runs a backend call until it succeeds, the store closes or
// storage is found tampered with (backend.Retry).
func (s *store) retry(ctx context.Context, call func() error) error {
	return backend.Retry(ctx, s.done, nil, call)
}

// slotAddr is the storage address of slot x.
func slotAddr(x Slot) string {
	b := make([]byte, 0, 24)
	b = append(b, SlotPrefix...)
	b = strconv.AppendInt(b, int64(x.P), 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(x.L), 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(x.S), 10)
	return string(b)
}

// ad is a slot's associated data: its address and its level's nonce.
func ad(addr string, nonce uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte(addr), nonce)
}

// write issues a partition group's write: every storage write of a
// group (the shuffler's, a recovery's redo, a bulk load's) goes through
// here, fenced by the group's token (fence). A write storage refuses
// because a later open of the store has written since fails with
// kv.ErrFenced, and the store stops (its loop treats it as fatal, as it
// does tampering, but says which).
func (s *store) write(ctx context.Context, w *WriteIO) error {
	return s.b.WriteFenced(ctx, s.fence(w.Group), s.sealWrite(w)) // a refusal is kv.ErrFenced
}

// claimFences writes every group's fence, with no item, before the
// open's first write: from then on an earlier open's late write to any
// group is refused, even to a group this open has not written yet. An
// open that finds a later one's fence stored fails with kv.ErrFenced.
func (s *store) claimFences(ctx context.Context) error {
	for g := range s.core.Groups() {
		if err := s.b.WriteFenced(ctx, s.fence(int32(g)), nil); err != nil {
			return fmt.Errorf("oblivistore: claiming group %d's fence: %w", g, err)
		}
	}
	return nil
}

// explain returns err, unless it is tampering and storage holds a later
// open's fence: that open's writes are what failed authentication here,
// and the store was deposed (kv.ErrFenced), not tampered with.
func (s *store) explain(err error) error {
	if !errors.Is(err, kv.ErrTampered) {
		return err
	}
	fences := make([]backend.Fence, s.core.Groups())
	for g := range fences {
		fences[g] = s.fence(int32(g))
	}
	ctx, cancel := context.WithTimeout(context.Background(), explainTimeout)
	defer cancel()
	var d backend.Deposition
	if fenced := d.Superseded(ctx, s.b, fences...); fenced != nil {
		return fmt.Errorf("oblivistore: a later open of the store has taken over (%w); what failed authentication was its writes: %v", fenced, err)
	}
	return err
}

// explainTimeout bounds explain's read of the fences.
const explainTimeout = 10 * time.Second

// fence is the fencing token of group g's writes: at storage address
// FencePrefix+g, the store's incarnation as the term, and no index (a
// group's writes of one open run concurrently, in no fixed order, so all
// carry one token; storage learns only how often the store was opened,
// which the recoveries' writes show it anyway).
func (s *store) fence(g int32) backend.Fence {
	return backend.Fence{Key: FencePrefix + strconv.Itoa(int(g)), Token: durable.FenceToken(s.incarnation, 0)}
}

// sealWrite seals a write's blocks: a kind byte, the value's length and
// the value padded to the value size, bound to address and nonce.
func (s *store) sealWrite(w *WriteIO) []backend.Item {
	items := make([]backend.Item, len(w.Slots))
	plain := make([]byte, 5+s.valueSize)
	for i, x := range w.Slots {
		clear(plain)
		if b := w.Blocks[i]; b.Real {
			plain[0] = 1
			binary.BigEndian.PutUint32(plain[1:], uint32(len(b.Val)))
			copy(plain[5:], b.Val)
		}
		addr := slotAddr(x)
		items[i] = backend.Item{Addr: addr, Value: s.keys.Seal(nil, ad(addr, w.Nonces[i]), plain)}
	}
	return items
}

// read reads and opens a ReadIO's slots, retrying failed calls.
func (s *store) read(ctx context.Context, r *ReadIO) ([]Block, error) {
	addrs := make([]string, len(r.Slots))
	for i, x := range r.Slots {
		addrs[i] = slotAddr(x)
	}
	var vals [][]byte
	if err := s.retry(ctx, func() (err error) { vals, err = s.b.Read(ctx, addrs); return err }); err != nil {
		return nil, err
	}
	blocks := make([]Block, len(vals))
	for i, v := range vals {
		b, err := s.open(addrs[i], r.Nonces[i], v)
		if err != nil {
			return nil, err
		}
		blocks[i] = b
	}
	return blocks, nil
}

func (s *store) open(addr string, nonce uint64, sealed []byte) (Block, error) {
	if sealed == nil {
		return Block{}, fmt.Errorf("%w: slot %s is missing", kv.ErrTampered, addr)
	}
	plain, err := s.keys.Open(nil, ad(addr, nonce), sealed)
	if err != nil {
		return Block{}, fmt.Errorf("slot %s: %w", addr, err)
	}
	n := binary.BigEndian.Uint32(plain[1:])
	if len(plain) != 5+s.valueSize || plain[0] > 1 || int(n) > s.valueSize {
		return Block{}, fmt.Errorf("%w: slot %s is malformed", kv.ErrTampered, addr)
	}
	if plain[0] == 0 {
		return Block{}, nil
	}
	return Block{Real: true, Val: plain[5 : 5+n : 5+n]}, nil
}

// do submits a request and waits for its reply or ctx. A request given
// up on still runs: it was journaled, and may take effect.
func (s *store) do(ctx context.Context, r Request) result {
	c := &call{req: r, reply: make(chan result, 1)}
	if !s.send(event{call: c, in: Input{Request: &c.req}}) {
		return result{err: kv.ErrClosed}
	}
	select {
	case res := <-c.reply:
		return res
	case <-ctx.Done():
		return result{err: ctx.Err()}
	}
}

func (s *store) Get(ctx context.Context, key string) ([]byte, bool, error) {
	r := s.do(ctx, Request{Op: OpGet, Key: key})
	return r.Old, r.Found, r.err
}

// Update implements kv.Updater: the Front applies the mutation to the
// key's block once it is in trusted memory, so every kind is one
// partition read, as a Get is.
func (s *store) Update(ctx context.Context, key string, m kv.Mutation) (kv.Result, error) {
	r := s.do(ctx, Request{Op: m.Op, Key: key, Val: bytes.Clone(m.Arg), If: m.If, ReturnOld: m.ReturnOld})
	return r.Result, r.err
}

func (s *store) Put(ctx context.Context, key string, val []byte) error {
	return s.do(ctx, Request{Op: OpPut, Key: key, Val: append([]byte{}, val...)}).err
}

func (s *store) Delete(ctx context.Context, key string) error {
	return s.do(ctx, Request{Op: OpDelete, Key: key}).err
}

// onLoop runs f on the loop, between two batches.
func (s *store) onLoop(f func()) error {
	ran := make(chan struct{})
	if !s.send(event{run: func() { f(); close(ran) }}) {
		return kv.ErrClosed
	}
	<-ran
	return nil
}

// Load fills an empty store (kv.Loader): the core lays every key out in
// its partition's top level, the driver writes them and checkpoints, all
// on the loop, so nothing else runs meanwhile.
func (s *store) Load(ctx context.Context, items iter.Seq2[string, []byte]) (n int, err error) {
	if lerr := s.onLoop(func() { n, err = s.load(ctx, items) }); lerr != nil {
		return 0, lerr
	}
	return n, err
}

func (s *store) load(ctx context.Context, items iter.Seq2[string, []byte]) (int, error) {
	if s.broken != nil {
		return 0, s.broken
	}
	writes, n, err := s.core.Load(items)
	switch {
	case errors.Is(err, ErrNotEmpty):
		return 0, kv.ErrNotEmpty
	case err != nil:
		return 0, err
	}
	for _, w := range writes {
		if err := s.write(ctx, w); err != nil {
			s.fail(fmt.Errorf("oblivistore: bulk load cut short: %w", err))
			return 0, s.broken
		}
	}
	if err := s.checkpointAll(ctx); err != nil {
		s.fail(fmt.Errorf("oblivistore: bulk load cut short: %w", err))
		return 0, s.broken
	}
	return n, nil
}

// Close waits for the core to settle (kv guarantees no request is in
// flight, so only I/O remains), checkpoints and closes the backend.
func (s *store) Close() error {
	close(s.closing)
	<-s.done
	s.ios.Wait()
	s.logs.wg.Wait() // a checkpoint in the background ends first, broken or not
	var err error
	if s.broken == nil {
		if err = s.checkpointAll(context.Background()); err != nil {
			err = fmt.Errorf("oblivistore: closing without a checkpoint; the next open replays the journal: %w", err)
		}
	}
	return errors.Join(err, s.b.Close())
}

// publish refreshes the statistics Stats returns.
func (s *store) publish() {
	st := s.core.stats()
	s.stats.Store(&st)
}

func (s *store) Stats() kv.Stats { return *s.stats.Load() }

// sortedWrites returns the writes in the order they were issued.
func sortedWrites(ws map[ioKey]*WriteIO) []*WriteIO {
	out := slices.Collect(maps.Values(ws))
	slices.SortFunc(out, func(a, b *WriteIO) int { return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.ID, b.ID)) })
	return out
}

// StoredKeys implements kv.KeyLister from the front's position map and
// the blocks it holds, read on the loop between two batches.
func (s *store) StoredKeys(context.Context) ([]string, error) {
	var keys []string
	if err := s.onLoop(func() { keys = s.core.front.st.Front.storedKeys() }); err != nil {
		return nil, err
	}
	return keys, nil
}
