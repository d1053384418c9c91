package kvtest_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"iter"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/seal"
)

// refProtocol is a small, correct protocol written only to test the
// contract suite; its Options (a string) inject one bug each.
const refProtocol = "kvtest-ref"

func init() {
	kv.Register(kv.Protocol{Name: refProtocol, Summary: "a small correct protocol that tests the contract suite", Open: openRef})
}

// openRef opens a refStore; env.Options, a string, names the bug it has.
func openRef(ctx context.Context, env kv.Env) (kv.Store, error) {
	bug, _ := env.Options.(string)
	s := &refStore{b: env.Backend, keys: env.Keys, capacity: env.Capacity, maxKey: env.MaxKeySize, bug: bug,
		index: map[string]bool{}, versions: map[string]uint64{}, cache: map[string][]byte{}}
	if env.Fresh || bug == "forget" {
		return s, nil
	}
	err := s.b.Scan(ctx, "r/", func(a string) error { s.index[a] = true; return nil })
	return s, err
}

type refStore struct {
	b        backend.Backend
	keys     *seal.Keys
	capacity int
	maxKey   int
	bug      string

	mu    sync.Mutex
	index map[string]bool
	// versions is the version each address was last written or deleted
	// with, kept while the store runs (a reopened store learns an
	// address's version from its first read): an older item put back
	// fails to open.
	versions map[string]uint64
	cache    map[string][]byte // only with bug "alias"
}

func (s *refStore) addr(key string) string {
	if s.bug == "keypad" { // pads keys with zeros: "a" and "a\x00" collide
		key += strings.Repeat("\x00", s.maxKey-len(key))
	}
	id := s.keys.PRF([]byte(key))
	return "r/" + hex.EncodeToString(id[:])
}

// ad is the associated data of the item at addr of version v.
func (s *refStore) ad(addr string, v uint64) []byte {
	switch s.bug {
	case "unversioned": // storage can put back an older item
		v = 0
	case "unbound": // storage can move an item to another address
		addr = ""
	}
	return binary.BigEndian.AppendUint64([]byte(addr), v)
}

// encode returns the item at addr holding val, under its next version: the
// version, then val sealed.
func (s *refStore) encode(addr string, val []byte) []byte {
	s.versions[addr]++
	v := s.versions[addr]
	switch s.bug {
	case "noseal":
		return append([]byte{}, val...)
	case "trimzeros":
		val = bytes.TrimRight(val, "\x00")
	}
	return s.keys.Seal(binary.BigEndian.AppendUint64(nil, v), s.ad(addr, v), val)
}

func (s *refStore) decode(addr string, b []byte) ([]byte, error) {
	if s.bug == "noseal" {
		return b, nil
	}
	if len(b) < 8 {
		return nil, kv.ErrTampered
	}
	v := binary.BigEndian.Uint64(b)
	if want, ok := s.versions[addr]; ok && v != want && s.bug != "unversioned" {
		return nil, fmt.Errorf("%w: version %d, want %d", kv.ErrTampered, v, want)
	}
	s.versions[addr] = v
	return s.keys.Open(nil, s.ad(addr, v), b[8:])
}

func (s *refStore) Get(ctx context.Context, key string) ([]byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.addr(key)
	if v, ok := s.cache[a]; ok {
		return v, true, nil
	}
	vals, err := s.b.Read(ctx, []string{a})
	if err != nil || vals[0] == nil {
		return nil, false, err
	}
	v, err := s.decode(a, vals[0])
	if err != nil {
		return nil, false, err
	}
	if s.bug == "emptymissing" && len(v) == 0 {
		return nil, false, nil
	}
	return v, true, nil
}

func (s *refStore) Put(ctx context.Context, key string, val []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.addr(key)
	if !s.index[a] && len(s.index) >= s.capacity && s.bug != "nocap" {
		return kv.ErrFull
	}
	if s.bug == "racycap" { // checks the capacity, then lets others in
		s.mu.Unlock()
		time.Sleep(time.Millisecond)
		s.mu.Lock()
	}
	if err := s.b.Write(ctx, []backend.Item{{Addr: a, Value: s.encode(a, val)}}); err != nil {
		return err
	}
	s.index[a] = true
	if s.bug == "alias" {
		s.cache[a] = val
	}
	return nil
}

func (s *refStore) Delete(ctx context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bug == "nodelete" {
		return nil
	}
	a := s.addr(key)
	if err := s.b.Delete(ctx, []string{a}); err != nil {
		return err
	}
	delete(s.cache, a)
	s.versions[a]++ // an item put back after the delete is older
	if s.bug != "leakdelete" {
		delete(s.index, a)
	}
	return nil
}

func (s *refStore) Load(ctx context.Context, items iter.Seq2[string, []byte]) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.index) > 0 {
		return len(s.index), kv.ErrNotEmpty
	}
	var batch []backend.Item
	for k, v := range items {
		a := s.addr(k)
		if !s.index[a] && len(s.index) >= s.capacity {
			if s.bug != "loadfull" { // keep the index true to storage
				if err := s.b.Write(ctx, batch); err != nil {
					return len(s.index), err
				}
			}
			return len(s.index), kv.ErrFull
		}
		s.index[a] = true
		batch = append(batch, backend.Item{Addr: a, Value: s.encode(a, v)})
	}
	return len(s.index), s.b.Write(ctx, batch)
}

func (s *refStore) Stats() kv.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return kv.Stats{Keys: int64(len(s.index))}
}

func (s *refStore) Close() error { return s.b.Close() }

func refConfig(bug string) kvtest.Config {
	return kvtest.Config{Protocol: refProtocol, Options: bug, Integrity: true}
}

// The suite passes on a correct protocol...
func TestContractPassesOnReference(t *testing.T) {
	kvtest.RunContract(t, refConfig(""), kvtest.Mem())
}

func TestLinearizableReference(t *testing.T) {
	kvtest.CheckLinearizable(t, kvtest.OpenStore(t, refConfig(""), kvtest.Mem()), kvtest.LinOptions{})
}

// ...and each injected bug makes the subtest that owns it fail.
var brokenWant = map[string][]string{
	"nocap":        {"Capacity"},
	"alias":        {"NoAliasing"},
	"noseal":       {"TamperFlip", "TamperSwap", "TamperReplay", "TamperMove"},
	"unversioned":  {"TamperReplay"},
	"unbound":      {"TamperSwap", "TamperMove"},
	"forget":       {"Restart"},
	"leakdelete":   {"Capacity", "Delete"},
	"trimzeros":    {"BinaryKeysValues"},
	"keypad":       {"BinaryKeysValues"},
	"emptymissing": {"EmptyValue"},
	"nodelete":     {"Delete", "Concurrent"},
	"racycap":      {"CapacityConcurrent"},
	"loadfull":     {"LoadOverCapacity"},
}

const helperEnv = "KVTEST_BROKEN_HELPER"

// TestBrokenHelper runs the suite on the broken variants; it only runs in
// the child process of TestContractCatchesBugs, since it is meant to fail.
func TestBrokenHelper(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("runs only as the child of TestContractCatchesBugs")
	}
	for bug := range brokenWant {
		t.Run(bug, func(t *testing.T) { kvtest.RunContract(t, refConfig(bug), kvtest.Mem()) })
	}
}

func TestContractCatchesBugs(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenHelper$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the contract suite passed on every broken protocol:\n%s", out)
	}
	failed := map[string]bool{}
	re := regexp.MustCompile(`--- FAIL: TestBrokenHelper/(\w+)/(\w+)`)
	for _, m := range re.FindAllStringSubmatch(string(out), -1) {
		failed[m[1]+"/"+m[2]] = true
	}
	if len(failed) == 0 {
		t.Fatalf("no subtest failures found in the helper's output (exit %v):\n%s", err, out)
	}
	var all []string
	for f := range failed {
		all = append(all, f)
	}
	sort.Strings(all)
	t.Logf("failed subtests: %v", all)
	for bug, subs := range brokenWant {
		for _, sub := range subs {
			if !failed[bug+"/"+sub] {
				t.Errorf("bug %q did not fail subtest %s", bug, sub)
			}
		}
	}
	if t.Failed() {
		t.Logf("helper output:\n%s", out)
	}
}
