package durable_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/durable"
)

// Machines of the tests: 1, 2 and 3.
var testMachines = []durable.MachineID{1, 2, 3}

// createMachines creates a store of testMachines, each with state
// "m<id>".
func createMachines(f *fixture) {
	f.t.Helper()
	states := map[durable.MachineID][]byte{}
	for _, m := range testMachines {
		states[m] = fmt.Appendf(nil, "m%d", m)
	}
	if err := f.log.CreateMachines(f.t.Context(), states); err != nil {
		f.t.Fatal(err)
	}
}

// replayAll replays the fixture's log into a fresh machine per ID.
func replayAll(f *fixture, failOn string) (map[durable.MachineID]*machine, error) {
	ms := map[durable.MachineID]*machine{}
	in := map[durable.MachineID]durable.Machine{}
	for _, id := range testMachines {
		ms[id] = &machine{failOn: failOn}
		in[id] = ms[id]
	}
	_, err := f.log.ReplayMachines(f.t.Context(), in)
	return ms, err
}

// Each machine is restored from its own checkpoint and given its own
// records, in order, and no other machine's; one machine that refuses a
// record fails the replay naming it, after the others have been rebuilt
// whole, and nothing is written again.
func TestReplayNeverCrossesMachines(t *testing.T) {
	f, ctx := newFixture(t), t.Context()
	createMachines(f)
	for i := range 9 {
		m := testMachines[i%3]
		op := durable.Op{Items: []backend.Item{{Addr: fmt.Sprint("x", m), Value: fmt.Append(nil, i)}}}
		if _, err := f.log.Machine(m).Commit(fmt.Appendf(nil, "m%d.%d", m, i), op); err != nil {
			t.Fatal(err)
		}
	}
	f.reopen()
	ms, err := replayAll(f, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range testMachines {
		var want []string
		want = append(want, fmt.Sprint("m", id))
		for i := int(id) - 1; i < 9; i += 3 {
			want = append(want, fmt.Sprintf("m%d.%d", id, i))
		}
		if !slices.Equal(ms[id].state, want) {
			t.Errorf("machine %d replayed %q; want %q", id, ms[id].state, want)
		}
	}
	if v, _ := f.b.Read(ctx, []string{"x3"}); string(v[0]) != "8" {
		t.Fatalf("after the replay storage holds %q at x3; want machine 3's last write, 8", v[0])
	}

	f.b.Delete(ctx, []string{"x1", "x2", "x3"})
	f.reopen()
	ms, err = replayAll(f, "m2.4")
	if err == nil || !strings.Contains(err.Error(), "machine 2: journal record 2 after the checkpoint") || !errors.Is(err, errBadRecord) {
		t.Fatalf("replay with machine 2's record 2 refused = %v; want an error naming machine 2's record 2", err)
	}
	if strings.Contains(err.Error(), "machine 1") || strings.Contains(err.Error(), "machine 3") {
		t.Fatalf("the error names a machine that replayed: %v", err)
	}
	if want := []string{"m1", "m1.0", "m1.3", "m1.6"}; !slices.Equal(ms[1].state, want) {
		t.Errorf("machine 1 beside a failed machine 2 replayed %q; want %q", ms[1].state, want)
	}
	if v, _ := f.b.Read(ctx, []string{"x1", "x3"}); v[0] != nil || v[1] != nil {
		t.Fatalf("a failed replay wrote %q to storage", v)
	}
}

// A journal holding a machine the store does not have, or a store's
// machine the journal has no checkpoint of, is refused.
func TestReplayRefusesUnknownMachines(t *testing.T) {
	f := newFixture(t)
	createMachines(f)
	f.log.Machine(4).Commit([]byte("of a machine never created"))
	f.reopen()
	if _, err := replayAll(f, ""); !errors.Is(err, durable.ErrLost) || !strings.Contains(err.Error(), "machine 4") {
		t.Fatalf("replay of records of machine 4 with no checkpoint = %v; want ErrLost naming machine 4", err)
	}
	f = newFixture(t)
	createMachines(f)
	f.reopen()
	_, err := f.log.ReplayMachines(t.Context(), map[durable.MachineID]durable.Machine{1: &machine{}, 2: &machine{}, 5: &machine{}})
	for _, want := range []string{"machine 3, which the store does not have", "machine 5 has no checkpoint"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("replay of machines 1, 2, 5 over a store of 1, 2, 3 = %v; want %q", err, want)
		}
	}
}

// A retired machine's checkpoint is passed over: the store replays
// without it.
func TestRetire(t *testing.T) {
	f := newFixture(t)
	if err := f.log.CreateMachines(t.Context(), map[durable.MachineID][]byte{0: []byte("whole"), 1: []byte("m1")}); err != nil {
		t.Fatal(err)
	}
	if err := f.log.Machine(0).Retire(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.reopen()
	m := &machine{}
	if _, err := f.log.ReplayMachines(t.Context(), map[durable.MachineID]durable.Machine{1: m}); err != nil || !slices.Equal(m.state, []string{"m1"}) {
		t.Fatalf("replay beside a retired machine = %v, %q", err, m.state)
	}
}

// blockingSync is storage whose first Sync, the first step of a
// checkpoint after the journal's, tells entered and waits for release;
// later ones return at once.
type blockingSync struct {
	*mem.Backend
	entered, release chan struct{}
	once             sync.Once
}

func (b *blockingSync) Sync(ctx context.Context) error {
	b.once.Do(func() {
		b.entered <- struct{}{}
		<-b.release
	})
	return nil
}

// A machine's checkpoint is taken while another machine goes on
// committing: machine 2's commits complete while machine 1's checkpoint
// is held inside, and a reopen gives machine 1 its checkpoint and
// machine 2 every record.
func TestCheckpointWhileAnotherAppends(t *testing.T) {
	f := newFixture(t)
	createMachines(f)
	st := &blockingSync{Backend: f.b, entered: make(chan struct{}), release: make(chan struct{})}
	log := durable.New(f.j, st, f.keys)
	one, two := log.Machine(1), log.Machine(2)
	if _, err := one.Commit([]byte("m1.a")); err != nil {
		t.Fatal(err)
	}
	checkpointed := make(chan error)
	go func() { checkpointed <- one.Checkpoint(context.Background(), []byte("m1,m1.a"), log.Last()) }()
	<-st.entered // machine 1's checkpoint is under way
	committed := make(chan error)
	go func() {
		for i := range 5 {
			if _, err := two.Commit(fmt.Appendf(nil, "m2.%d", i)); err != nil {
				committed <- err
				return
			}
		}
		committed <- nil
	}()
	select {
	case err := <-committed:
		if err != nil {
			t.Fatal(err)
		}
	case err := <-checkpointed:
		t.Fatalf("machine 1's checkpoint ended (%v) while held", err)
	case <-time.After(30 * time.Second): // a failure only: the commits wait on nothing the test holds
		t.Fatal("machine 2's commits waited for machine 1's checkpoint")
	}
	close(st.release)
	if err := <-checkpointed; err != nil {
		t.Fatal(err)
	}
	f.reopen()
	ms, err := replayAll(f, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"m1,m1.a"}; !slices.Equal(ms[1].state, want) {
		t.Errorf("machine 1 recovered %q; want its checkpoint alone, %q", ms[1].state, want)
	}
	if want := []string{"m2", "m2.0", "m2.1", "m2.2", "m2.3", "m2.4"}; !slices.Equal(ms[2].state, want) {
		t.Errorf("machine 2 recovered %q; want %q", ms[2].state, want)
	}
}

// Machines checkpointed at different positions, each while the others
// append, recover the same states as the same records with no
// checkpoint at all.
func TestCheckpointsAtDifferentPositions(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 6 {
		plain, cps := newFixture(t), newFixture(t)
		createMachines(plain)
		createMachines(cps)
		live := map[durable.MachineID]*machine{}
		for _, m := range testMachines {
			live[m] = &machine{state: []string{fmt.Sprint("m", m)}}
		}
		for i := range 60 {
			m := testMachines[rng.IntN(3)]
			rec := fmt.Appendf(nil, "m%d.%d", m, i)
			live[m].Apply(rec)
			for _, f := range []*fixture{plain, cps} {
				if _, err := f.log.Machine(m).Commit(rec); err != nil {
					t.Fatal(err)
				}
			}
			if c := testMachines[rng.IntN(3)]; rng.IntN(8) == 0 {
				if err := cps.log.Machine(c).CheckpointOf(t.Context(), live[c]); err != nil {
					t.Fatal(err)
				}
			}
		}
		plain.reopen()
		cps.reopen()
		want, err := replayAll(plain, "")
		if err != nil {
			t.Fatal(err)
		}
		got, err := replayAll(cps, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range testMachines {
			w, _ := want[m].Snapshot()
			g, _ := got[m].Snapshot()
			// A checkpoint folds the records before it into one entry.
			if strings.ReplaceAll(string(g), ",", "") != strings.ReplaceAll(string(w), ",", "") {
				t.Fatalf("round %d, machine %d: recovered %q from its checkpoints; %q from its records alone", round, m, g, w)
			}
		}
	}
}

// A machine's checkpoint is due after its own records, or once its oldest
// record no checkpoint covers lies far behind the other machines': a
// machine appending rarely does not hold the journal back for ever.
func TestDueWhenBehind(t *testing.T) {
	f := newFixture(t)
	createMachines(f)
	f.log.SetEvery(10)
	one, two := f.log.Machine(1), f.log.Machine(2)
	one.Append([]byte("m1.0"))
	for i := range 39 {
		two.Append(fmt.Appendf(nil, "m2.%d", i))
		if i == 9 && !two.Due() {
			t.Fatal("machine 2 is not due after 10 of its records")
		}
		if one.Due() {
			t.Fatalf("machine 1 is due with 1 record, %d records behind", i+1)
		}
	}
	two.Append([]byte("m2.39"))
	if !one.Due() {
		t.Fatal("machine 1 is not due with its record 40 records behind (4 intervals)")
	}
}
