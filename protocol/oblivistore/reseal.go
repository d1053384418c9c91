package oblivistore

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/seal"
)

// ResealState implements kv.ResealStater: for every level of every
// partition, the nonces its slots on storage may be sealed under: the
// installed level's, and that of each level a shuffle wrote in its place
// whose completion the store had not taken in yet. A level with none
// holds only what earlier, emptied layouts left: slots the store never
// reads again.
func (s *store) ResealState() ([]byte, error) {
	groups := s.core.groups
	parts, levels := len(groups[0].st.Group.Parts), len(groups[0].st.Group.Parts[0].Levels)
	nums := []uint64{uint64(parts), uint64(levels)}
	for p := range parts {
		g := &groups[p%len(groups)].st.Group
		for l := range levels {
			nonces := g.nonces(int32(p), int8(l))
			nums = append(append(nums, uint64(len(nonces))), nonces...)
		}
	}
	return kv.EncodeNumbers(nums), nil
}

// nonces returns the nonces the slots of level l of partition p may be
// sealed under (see ResealState).
func (s *Group) nonces(p int32, l int8) []uint64 {
	var out []uint64
	if lv := s.Parts[p].Levels[l]; lv.Filled {
		out = append(out, lv.Nonce)
	}
	for _, j := range s.Jobs {
		for i, dest := range j.Dest {
			if j.P == p && j.Computed && dest == l {
				out = append(out, j.NewLevels[i].Nonce)
			}
		}
	}
	return out
}

// resealer re-seals the slots (kv.Resealer), each bound to its address and
// one of its level's nonces in the store's state (ResealState). A slot of
// a level with no nonce is left over from an emptied layout, never read
// again: it is replaced by a dummy of the same size under the new key.
type resealer struct {
	env    kv.ResealEnv
	levels int
	nonces [][]uint64 // by partition*levels + level
}

func newResealer(env kv.ResealEnv) (kv.Resealer, error) {
	nums, err := kv.DecodeNumbers(env.State)
	if err != nil || len(nums) < 2 {
		return nil, fmt.Errorf("oblivistore: a malformed reseal state: %v", err)
	}
	r := resealer{env: env, levels: int(nums[1])}
	rest := nums[2:]
	for range nums[0] * nums[1] {
		if len(rest) == 0 || uint64(len(rest)-1) < rest[0] {
			return nil, fmt.Errorf("oblivistore: a malformed reseal state")
		}
		r.nonces, rest = append(r.nonces, rest[1:1+rest[0]]), rest[1+rest[0]:]
	}
	return r, nil
}

func (r resealer) Reseal(addr string, stored []byte) (backend.Item, bool, error) {
	rest, ok := strings.CutPrefix(addr, SlotPrefix)
	if !ok {
		return backend.Item{}, false, nil
	}
	nonces, err := r.levelNonces(rest)
	if err != nil {
		return backend.Item{}, true, fmt.Errorf("%w: %q: %v", kv.ErrTampered, addr, err)
	}
	if len(nonces) == 0 {
		return backend.Item{Addr: addr, Value: r.env.To.Seal(nil, ad(addr, 0), make([]byte, 5+r.env.ValueSize))}, true, nil
	}
	for _, n := range nonces {
		if plain, err := seal.OpenEither(r.env.From, r.env.To, ad(addr, n), stored); err == nil {
			return backend.Item{Addr: addr, Value: r.env.To.Seal(nil, ad(addr, n), plain)}, true, nil
		}
	}
	return backend.Item{}, true, fmt.Errorf("slot %q: %w", addr, kv.ErrTampered)
}

// levelNonces returns the nonces of the level of the slot whose address
// is SlotPrefix followed by rest (p/l/s).
func (r resealer) levelNonces(rest string) ([]uint64, error) {
	f := strings.Split(rest, "/")
	if len(f) != 3 {
		return nil, fmt.Errorf("no slot address")
	}
	p, perr := strconv.Atoi(f[0])
	l, lerr := strconv.Atoi(f[1])
	if perr != nil || lerr != nil || p < 0 || l < 0 || l >= r.levels || p*r.levels+l >= len(r.nonces) {
		return nil, fmt.Errorf("no slot of the store")
	}
	return r.nonces[p*r.levels+l], nil
}
