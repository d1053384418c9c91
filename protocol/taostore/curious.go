package taostore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/audit/auditspec"
	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/seal"
)

// curiousWait is how long the CURIOUS check waits for a reply that must
// not come while storage holds a read back. A reply that comes fails
// the check; one that does not come within it passes, so a loaded
// machine can only make a leaking Sequencer pass, never a sound one
// fail.
const curiousWait = time.Second

// gate is a backend whose hold-th path read (a Read of several
// addresses; metadata and state are single) waits until release is
// closed: storage holding a response back, as an asynchronous network
// lets it.
type gate struct {
	backend.Backend
	hold    atomic.Int64
	reads   atomic.Int64 // path reads begun
	served  atomic.Int64 // path reads answered
	held    chan struct{}
	release chan struct{}
}

func (g *gate) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	if len(addrs) > 1 {
		if g.reads.Add(1) == g.hold.Load() {
			close(g.held)
			<-g.release
		}
		defer g.served.Add(1)
	}
	return g.Backend.Read(ctx, addrs)
}

// curious is the CURIOUS attack of TaoStore Sec. II-B on the Sequencer:
// two keys are put; storage holds back the path read of a Get of the
// first and answers the path read of a Get of the second at once. The
// second reply must not leave before the first: replies leave in the
// order requests arrived, whichever path returns first. Storage sees
// when replies leave through the clients' traffic, not through the Tap.
func curious(ctx context.Context, a auditspec.Active) (audit.Check, error) {
	g := &gate{Backend: mem.New(), held: make(chan struct{}), release: make(chan struct{})}
	master, err := seal.GenerateMaster()
	if err != nil {
		return audit.Check{}, err
	}
	sk, err := seal.NewKeys(master)
	if err != nil {
		return audit.Check{}, err
	}
	s, err := kv.Open(ctx, kv.Config{Protocol: a.Protocol, Backend: g, Keys: sk, Capacity: a.Capacity,
		ValueSize: 32, MaxKeySize: 32, Options: a.Options})
	if err != nil {
		return audit.Check{}, err
	}
	defer s.Close()
	first, second := "key-00000", "key-00001"
	for _, k := range []string{first, second} {
		if err := s.Put(ctx, k, []byte(k)); err != nil {
			return audit.Check{}, err
		}
	}
	violations, err := hold(ctx, g, s, first, second, a.Timeout)
	c := audit.Exact("replies leave in arrival order while storage holds a read back (CURIOUS)", violations)
	if len(violations) == 0 && err == nil {
		c.Detail = fmt.Sprintf("the later reply waited %v for the held one", curiousWait)
	}
	return c, err
}

// hold holds back the path read of a Get of first, gets second, and
// reports a reply to second that left before first's read was let go,
// or a path read that never came within bound.
func hold(ctx context.Context, g *gate, s kv.Store, first, second string, bound time.Duration) ([]string, error) {
	var wg sync.WaitGroup
	defer wg.Wait() // deferred first, so it runs after the read is let go
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	g.hold.Store(g.reads.Load() + 1)
	release := sync.OnceFunc(func() { close(g.release) })
	defer release()
	errs := make([]error, 2)
	wg.Go(func() { _, _, errs[0] = s.Get(ctx, first) })
	if err := auditspec.WaitUntil(ctx, func() bool { return isClosed(g.held) }); err != nil {
		return []string{"the earlier Get read no path: " + err.Error()}, nil
	}
	replied := make(chan struct{})
	wg.Go(func() {
		_, _, errs[1] = s.Get(ctx, second)
		close(replied)
	})
	if err := auditspec.WaitUntil(ctx, func() bool { return g.served.Load() >= g.hold.Load() }); err != nil {
		return []string{"the later Get's path read was never answered: " + err.Error()}, nil
	}
	var violations []string
	select {
	case <-replied:
		violations = append(violations, "the reply to the later Get left while the earlier Get's path read was held back")
	case <-time.After(curiousWait):
	}
	release()
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		return violations, fmt.Errorf("CURIOUS: %v, %v", errs[0], errs[1])
	}
	return violations, nil
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
