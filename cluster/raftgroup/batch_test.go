package raftgroup

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestConcurrentProposalsShareEntries: proposals made while an entry is
// being committed go together as one entry; each still gets its own
// outcome (the machine's count after its own entry, or its own error),
// and every replica applies them in the same order.
func TestConcurrentProposalsShareEntries(t *testing.T) {
	g := newTestGroup(t, 3)
	g.propose("first")
	for _, m := range g.machines {
		m.mu.Lock()
		m.delay = time.Millisecond // entries queue behind the one being applied
		m.mu.Unlock()
	}
	leader := g.replicas[g.leader()]
	before := leader.Status().CommitIndex
	const n = 64
	outs, errs := make([]any, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		entry := fmt.Sprint("e", i)
		if i == n/2 {
			entry = "refuse"
		}
		wg.Go(func() { outs[i], errs[i] = leader.Propose(context.Background(), []byte(entry)) })
	}
	wg.Wait()
	var counts []uint64
	for i := range n {
		switch {
		case i == n/2:
			if errs[i] == nil || errs[i].Error() != "refused" {
				t.Errorf("the refused proposal got %v, %v", outs[i], errs[i])
			}
		case errs[i] != nil:
			t.Fatalf("proposal %d: %v", i, errs[i])
		default:
			counts = append(counts, outs[i].(uint64))
		}
	}
	slices.Sort(counts)
	for i, c := range counts {
		if c != uint64(i+2) { // "first" was 1
			t.Fatalf("the proposals got counts %v: each must get the count after its own entry, 2 to %d once each", counts, n)
		}
	}
	entries := leader.Status().CommitIndex - before
	t.Logf("%d proposals in %d entries", n, entries)
	if entries >= n {
		t.Errorf("%d proposals took %d entries: none shared one", n, entries)
	}
	g.converged(n) // "first" and the 63 accepted
}

// TestBatchCodec: a batch decodes to its entries, empty ones included,
// and a damaged one is refused.
func TestBatchCodec(t *testing.T) {
	entries := [][]byte{[]byte("a"), {}, []byte("ccc")}
	var batch []*proposal
	for _, e := range entries {
		batch = append(batch, &proposal{entry: e})
	}
	b := encodeBatch(batch)
	got, err := decodeBatch(b)
	if err != nil || len(got) != len(entries) {
		t.Fatalf("decodeBatch = %q, %v", got, err)
	}
	for i := range entries {
		if string(got[i]) != string(entries[i]) {
			t.Fatalf("entry %d = %q, want %q", i, got[i], entries[i])
		}
	}
	for _, bad := range [][]byte{b[:len(b)-1], append(slices.Clone(b), 0), {0xff, 0xff, 0x03}} {
		if _, err := decodeBatch(bad); err == nil {
			t.Errorf("decodeBatch(%x) accepted a damaged batch", bad)
		}
	}
}
