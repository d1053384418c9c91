package oblivistore

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/observe"
)

// PartitionCall is one backend call of a partition ORAM (ObliviStore) as
// storage saw it: the partition it touched and its slots by level.
type PartitionCall struct {
	Seq   uint64
	Write bool
	// Request marks a read that is a request's partition read; other
	// reads are the shuffler's cache-ins. Which is which is public in
	// ObliviStore (its scheduler is simulated from public information,
	// Theorem 1); the caller says.
	Request bool
	P       int
	Slots   []LevelSlot
}

// LevelSlot is a slot of a partition: level and slot within the level.
type LevelSlot struct{ L, S int }

// IssuedRead is a read the proxy issued, as a test hook logged it: the
// partition, the addresses (none for a request's read that found no slot
// to read), and whether it is a request's partition read.
type IssuedRead struct {
	P       int
	Addrs   []string
	Request bool
}

// ParsePartitionCalls returns the reads and writes of records whose
// addresses begin with prefix and name prefix+"p/l/s", merged with the
// reads the proxy issued (in the order it issued them, which is the
// records' order when it issues one call at a time): each issued read is
// matched with the next recorded read of its addresses, and a request's
// read of no slot becomes a call of no slot. Calls to other addresses
// (metadata, checkpoints) are left out; a call that mixes partitions, or
// a recorded read nobody issued, is an error.
func ParsePartitionCalls(records []observe.Record, prefix string, issued []IssuedRead) ([]PartitionCall, error) {
	recorded, err := TapPartitionCalls(records, prefix)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(recorded, func(a, b PartitionCall) int { return cmp.Compare(a.Seq, b.Seq) })
	var calls []PartitionCall
	next := 0
	for _, is := range issued {
		if len(is.Addrs) == 0 {
			calls = append(calls, PartitionCall{Request: true, P: is.P})
			continue
		}
		for next < len(recorded) && recorded[next].Write {
			calls = append(calls, recorded[next])
			next++
		}
		if next == len(recorded) {
			return nil, fmt.Errorf("the proxy issued a read of %d slots of partition %d that storage never saw", len(is.Addrs), is.P)
		}
		c := recorded[next]
		if want, err := partitionCall(observe.Record{Addrs: is.Addrs}, prefix); err != nil || !slices.Equal(want.Slots, c.Slots) {
			return nil, fmt.Errorf("call %d is not the read the proxy issued next (partition %d, %d slots)", c.Seq, is.P, len(is.Addrs))
		}
		c.Request = is.Request
		calls = append(calls, c)
		next++
	}
	for _, c := range recorded[next:] {
		if !c.Write {
			return nil, fmt.Errorf("call %d is a read the proxy did not issue", c.Seq)
		}
		calls = append(calls, c)
	}
	return calls, nil
}

// partitionCall parses one record's addresses.
func partitionCall(r observe.Record, prefix string) (PartitionCall, error) {
	c := PartitionCall{Seq: r.Seq, Write: r.Op == observe.OpWrite, P: -1}
	for _, a := range r.Addrs {
		p, ls, err := parseSlot(a, prefix)
		if err != nil {
			return c, fmt.Errorf("call %d: %w", r.Seq, err)
		}
		if c.P >= 0 && p != c.P {
			return c, fmt.Errorf("call %d touches partitions %d and %d", r.Seq, c.P, p)
		}
		c.P = p
		c.Slots = append(c.Slots, ls)
	}
	return c, nil
}

func parseSlot(addr, prefix string) (int, LevelSlot, error) {
	parts := strings.Split(strings.TrimPrefix(addr, prefix), "/")
	if len(parts) != 3 {
		return 0, LevelSlot{}, fmt.Errorf("address %q is not %sp/l/s", addr, prefix)
	}
	var n [3]int
	for i, s := range parts {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			return 0, LevelSlot{}, fmt.Errorf("address %q is not %sp/l/s", addr, prefix)
		}
		n[i] = v
	}
	return n[0], LevelSlot{L: n[1], S: n[2]}, nil
}

// levelSlots is the size of level l of a partition: 2*2^l slots.
func levelSlots(l int) int { return 2 << l }

// SlotsReadOnce checks the hierarchical ORAM's rule that storage never
// sees a slot read twice between two writes of its level (Goldreich and
// Ostrovsky's construction, on which ObliviStore's partitions rest,
// Sec. III-B): every write of a level writes all its 2*2^l slots, and
// every read reads slots of written levels, each once per write. It is
// exact, and catches a repeated access that reads its block's old slot
// again, which links the two accesses.
func SlotsReadOnce(name string, calls []PartitionCall) audit.Check {
	type level struct{ p, l int }
	read := map[level]map[int]bool{} // slots read since the level's last write
	var violations []string
	for _, c := range calls {
		if c.Write {
			for l, slots := range byLevel(c.Slots) {
				if len(slots) != levelSlots(l) || !allOf(slots, levelSlots(l)) {
					violations = append(violations, fmt.Sprintf("call %d writes %d slots of partition %d level %d, not all %d once", c.Seq, len(slots), c.P, l, levelSlots(l)))
				}
				read[level{c.P, l}] = map[int]bool{}
			}
			continue
		}
		for _, ls := range c.Slots {
			seen, ok := read[level{c.P, ls.L}]
			switch {
			case !ok:
				violations = append(violations, fmt.Sprintf("call %d reads partition %d level %d, never written", c.Seq, c.P, ls.L))
			case seen[ls.S]:
				violations = append(violations, fmt.Sprintf("call %d reads slot %d of partition %d level %d a second time since the level was written", c.Seq, ls.S, c.P, ls.L))
			default:
				seen[ls.S] = true
			}
		}
	}
	return audit.Exact(name, violations)
}

// byLevel groups slots by level.
func byLevel(slots []LevelSlot) map[int][]int {
	m := map[int][]int{}
	for _, ls := range slots {
		m[ls.L] = append(m[ls.L], ls.S)
	}
	return m
}

// allOf reports whether slots are 0..n-1, each once.
func allOf(slots []int, n int) bool {
	seen := make([]bool, n)
	for _, s := range slots {
		if s < 0 || s >= n || seen[s] {
			return false
		}
		seen[s] = true
	}
	return true
}

// LevelsReadOnce checks ObliviStore's partition reader (Fig. 6): every
// request's read of a partition reads exactly one slot of every level of
// the partition that can still be read (filled, with a slot not read
// since it was written), and nothing else, whether the block is there,
// elsewhere in the partition, in the proxy, or nowhere. It is exact, and
// catches a read that stops at the level holding the block, or that skips
// a partition when the key does not exist (then requests is larger than
// the request reads seen).
//
// A shuffle's write installs its levels when the proxy learns it
// completed, which storage sees only when a later read touches them, so
// the written levels count from the first read that touches one of them
// (or the partition's next write); until then they and the levels the
// shuffle emptied are not expected, which is right, as every level the
// shuffle read was read out before it was written.
func LevelsReadOnce(name string, calls []PartitionCall, requests int) audit.Check {
	parts := map[int]*partitionView{}
	view := func(p int) *partitionView {
		if parts[p] == nil {
			parts[p] = &partitionView{unread: map[int]int{}}
		}
		return parts[p]
	}
	var violations []string
	seen := 0
	for _, c := range calls {
		v := view(c.P)
		if c.Write {
			v.install()
			v.pending = slices.Sorted(maps.Keys(byLevel(c.Slots)))
			continue
		}
		levels := byLevel(c.Slots)
		if v.touchesPending(levels) {
			v.install()
		}
		if c.Request {
			seen++
			if msg := v.check(levels); msg != "" {
				violations = append(violations, fmt.Sprintf("request read %d of partition %d: %s", c.Seq, c.P, msg))
			}
		}
		for l, slots := range levels {
			v.unread[l] -= len(slots)
		}
	}
	if seen != requests {
		violations = append(violations, fmt.Sprintf("%d requests, but %d request reads: a request that reads nothing shows storage which partitions it could not be in", requests, seen))
	}
	return audit.Exact(name, violations)
}

// partitionView is a partition's levels as storage can follow them.
type partitionView struct {
	unread  map[int]int // level -> slots not read since written (absent: empty)
	pending []int       // levels of the last write, not yet installed
}

// install applies the last write: its levels are fresh, and every lower
// level it did not write is empty.
func (v *partitionView) install() {
	if len(v.pending) == 0 {
		return
	}
	top := v.pending[len(v.pending)-1]
	for l := range top + 1 {
		delete(v.unread, l)
	}
	for _, l := range v.pending {
		v.unread[l] = levelSlots(l)
	}
	v.pending = nil
}

func (v *partitionView) touchesPending(levels map[int][]int) bool {
	for _, l := range v.pending {
		if len(levels[l]) > 0 {
			return true
		}
	}
	return false
}

// check compares a request read's levels with the readable levels.
func (v *partitionView) check(levels map[int][]int) string {
	var problems []string
	for l, slots := range levels {
		if len(slots) > 1 {
			problems = append(problems, fmt.Sprintf("%d slots of level %d", len(slots), l))
		}
		if v.unread[l] <= 0 {
			problems = append(problems, fmt.Sprintf("reads level %d, which has no unread slot", l))
		}
	}
	for l, n := range v.unread {
		if n > 0 && len(levels[l]) == 0 {
			problems = append(problems, fmt.Sprintf("skips level %d (%d slots unread)", l, n))
		}
	}
	slices.Sort(problems)
	return strings.Join(problems, ", ")
}

// PartitionCounts counts the request reads of each of partitions.
func PartitionCounts(calls []PartitionCall, partitions int) []int {
	counts := make([]int, partitions)
	for _, c := range calls {
		if c.Request && c.P < partitions {
			counts[c.P]++
		}
	}
	return counts
}

// TapPartitionCalls returns the reads and writes of records whose
// addresses begin with prefix and name prefix+"p/l/s", in Tap order, from
// the Tap alone. Unlike ParsePartitionCalls it cannot tell a request's
// partition read from a shuffler's cache-in (Request is false on every
// call): a cache-in of one slot of each of some levels looks like a
// request's read to storage, and a request's read of no slot is no call
// at all. SlotsReadOnce needs no more; LevelsReadOnce and
// PartitionCounts need the proxy's word on which reads are requests'.
func TapPartitionCalls(records []observe.Record, prefix string) ([]PartitionCall, error) {
	var calls []PartitionCall
	for _, r := range records {
		if r.Err || (r.Op != observe.OpRead && r.Op != observe.OpWrite) || len(r.Addrs) == 0 || !strings.HasPrefix(r.Addrs[0], prefix) {
			continue
		}
		c, err := partitionCall(r, prefix)
		if err != nil {
			return nil, err
		}
		calls = append(calls, c)
	}
	return calls, nil
}

// UnreadSlotChoices is storage's view of the slot every read takes: its
// rank, in slot order, among the slots of its level not read since the
// level was last written, and how many those are. In ObliviStore each is
// uniform given everything storage saw before, whatever the read: a
// level is a random permutation of its blocks (Sec. V-C, Fig. 7), a real
// read takes its block's slot, a dummy read the next of the level's
// dummies in a random order (Fig. 6, Table I), and a level being read
// out (early and shuffling cache-ins) is read in a random order. No
// choice looks at slot numbers, so any two unread slots are alike to
// storage, and calls in flight together may reach it in any order.
//
// The choices come in groups, by level and by whether the call reads one
// slot of the level (a request's read or an early cache-in) or several
// (shuffling cache-ins): group 2*l for one, 2*l+1 for several. Both are
// fixed before a slot is chosen, and ChoicesByGroup tests each group, for
// pooled they hide what matters: every slot of a level is read once
// between two writes, so a level written with its real blocks first,
// whose real reads take low ranks and dummy reads high ones, can
// balance to a uniform histogram. Reads of a slot already read, or of a
// level never written, are left out: SlotsReadOnce reports them.
func UnreadSlotChoices(calls []PartitionCall) [][]audit.Choice {
	type level struct{ p, l int }
	levels := map[level]*readSlots{}
	var groups [][]audit.Choice
	for _, c := range calls {
		if c.Write {
			for l := range byLevel(c.Slots) {
				levels[level{c.P, l}] = newReadSlots(levelSlots(l))
			}
			continue
		}
		perLevel := byLevel(c.Slots)
		for _, ls := range c.Slots {
			r := levels[level{c.P, ls.L}]
			if r == nil || ls.S >= len(r.read) || r.read[ls.S] {
				continue
			}
			g := 2 * ls.L
			if len(perLevel[ls.L]) > 1 {
				g++
			}
			for len(groups) <= g {
				groups = append(groups, nil)
			}
			groups[g] = append(groups[g], audit.Choice{Rank: ls.S - r.readBelow(ls.S), Unread: len(r.read) - r.count})
			r.add(ls.S)
		}
	}
	return groups
}

// readSlots are the slots of a level read since it was written, also
// counted in a Fenwick tree, so that the slots read below a slot take
// logarithmic time to count.
type readSlots struct {
	read  []bool
	tree  []int // tree[i] counts the read slots in (i - i&-i, i], 1-based
	count int
}

func newReadSlots(n int) *readSlots {
	return &readSlots{read: make([]bool, n), tree: make([]int, n+1)}
}

func (r *readSlots) add(s int) {
	r.read[s] = true
	r.count++
	for i := s + 1; i < len(r.tree); i += i & -i {
		r.tree[i]++
	}
}

// readBelow counts the read slots below s.
func (r *readSlots) readBelow(s int) int {
	n := 0
	for i := s; i > 0; i -= i & -i {
		n += r.tree[i]
	}
	return n
}
