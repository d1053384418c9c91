package kvtest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/kv"
)

// process opens a protocol's store, raw (no kv.Open around it), over one
// storage and one journal directory, as successive processes of a proxy
// would, after a crash too.
type process struct {
	t    *testing.T
	open kv.Factory
	env  kv.Env
	dir  string
}

// newProcess returns a process of the store open makes over env's
// backend, with fresh keys and journal directory.
func newProcess(t *testing.T, open kv.Factory, env kv.Env) *process {
	env.Keys = NewKeys(t)
	return &process{t: t, open: open, env: env, dir: t.TempDir()}
}

// start opens the store (fresh: a new one) and its journal.
func (p *process) start(fresh bool) (kv.Store, *journal.Journal) {
	p.t.Helper()
	j, err := journal.Open(p.dir, p.env.Keys, journal.Options{})
	if err != nil {
		p.t.Fatal(err)
	}
	p.env.Fresh, p.env.Journal = fresh, j
	s, err := p.open(p.t.Context(), p.env)
	if err != nil {
		j.Crash()
		p.t.Fatal(err)
	}
	return s, j
}

// CheckEarlierUnnamed shows that a store whose trusted state an earlier
// build wrote, keeping no keys' names, opens, serves, and refuses to name
// its keys with kv.ErrKeysUnnamed until each is written again. open is
// the protocol's factory; env gives the store's capacity, value size and
// options, and CheckEarlierUnnamed adds storage, keys and a journal.
// downgrade rewrites the state of the store it is given as that build
// wrote it (a checkpoint of the earlier format), before the process dies.
func CheckEarlierUnnamed(t *testing.T, open kv.Factory, env kv.Env, downgrade func(kv.Store)) {
	t.Helper()
	b := mem.New()
	env.Backend = b
	p := newProcess(t, open, env)
	s, j := p.start(true)
	want := Model{}
	for i := range 8 {
		want.Put(t, s, fmt.Sprint("k", i), fmt.Sprint("v", i))
	}
	downgrade(s)
	j.Crash()
	s.Close()
	b.Reopen()
	s, j = p.start(false)
	defer func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
		j.Close()
	}()
	want.Check(t, s, "reopened from an earlier build's state")
	if _, err := storedKeys(t.Context(), s); !errors.Is(err, kv.ErrKeysUnnamed) {
		t.Fatalf("StoredKeys of keys an earlier build stored: %v; want kv.ErrKeysUnnamed", err)
	}
	for i := range 8 {
		want.Put(t, s, fmt.Sprint("k", i), fmt.Sprint("again", i))
	}
	want.Put(t, s, "new", "v")
	want.CheckNames(t, s, "once every key is written again")
}

// storedKeys asks s for its keys' names; s must name them.
func storedKeys(ctx context.Context, s kv.Store) ([]string, error) {
	l, ok := kv.AsKeyLister(s)
	if !ok {
		return nil, fmt.Errorf("the store does not name its keys (kv.KeyLister)")
	}
	return l.StoredKeys(ctx)
}
