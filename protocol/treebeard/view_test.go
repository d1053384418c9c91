package treebeard

import (
	"testing"

	"github.com/oblivkv/oblivkv/observe"
)

// TestSplitTreesAfterTakeover: after a new leader's claim of a tree's
// fence, its repeat of its predecessor's last Write and of a Read since
// that Write are set aside, each once and in that order, and so is a
// deposed leader's write storage refused; a Read of other slots, the same
// Read without a claim, the operation's own Write of the same buckets
// (after the repeats, or after the claim when its Read's outcome was
// committed before it), and a failed call storage did not refuse are
// kept or refused.
func TestSplitTreesAfterTakeover(t *testing.T) {
	fence := fencePrefix + "0"
	write := observe.Record{Op: observe.OpWrite, Addrs: []string{"tb/0/m/1", "tb/0/s/1/0"}, Fence: fence, Token: 5}
	read := observe.Record{Op: observe.OpRead, Addrs: []string{"tb/0/s/1/2"}}
	other := observe.Record{Op: observe.OpRead, Addrs: []string{"tb/0/s/1/3"}}
	claim := observe.Record{Op: observe.OpWrite, Fence: fence, Token: 9}
	refused := observe.Record{Op: observe.OpWrite, Addrs: write.Addrs, Fence: fence, Token: 5, Err: true}
	for _, c := range []struct {
		name    string
		records []observe.Record
		kept    int // tree 0's calls kept; -1: refused
	}{
		{"repeats after a claim", []observe.Record{write, read, claim, write, read}, 2},
		{"refused late write", []observe.Record{write, read, claim, refused, read}, 2},
		{"other slots after a claim", []observe.Record{write, read, claim, other}, 3},
		{"repeat without a claim", []observe.Record{write, read, read}, 3},
		{"a new call ends the repeats", []observe.Record{write, read, claim, other, read}, 4},
		{"the operation's own Write of the same buckets", []observe.Record{write, read, claim, write, read, write}, 3},
		{"its own Write, the last not repeated", []observe.Record{write, read, claim, read, write}, 3},
		{"a Read repeated once", []observe.Record{write, read, claim, write, read, read}, 3},
		{"a second claim repeats again", []observe.Record{write, read, claim, write, claim, write, read}, 2},
		{"the Read's operation's own Write after a claim", []observe.Record{write, read, claim, write, other}, 4},
		{"its own Write, repeated by the next leader", []observe.Record{write, read, claim, write, claim, write, other}, 4},
		{"its own Write, last", []observe.Record{write, read, claim, write}, 3},
		{"failed, not refused", []observe.Record{write, {Op: observe.OpRead, Addrs: read.Addrs, Err: true}}, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			for i := range c.records {
				c.records[i].Seq = uint64(i + 1)
			}
			per, err := splitTrees(c.records, 2)
			switch {
			case c.kept < 0 && err == nil:
				t.Fatalf("kept %d calls of a failed one", len(per[0]))
			case c.kept >= 0 && err != nil:
				t.Fatal(err)
			case c.kept >= 0 && len(per[0]) != c.kept:
				t.Fatalf("kept %d calls of tree 0, want %d", len(per[0]), c.kept)
			}
		})
	}
}
