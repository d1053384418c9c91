package waffle

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/internal/durable/delta"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/seal"
)

// ResealState implements kv.ResealStater: every object's reference and
// address timestamp, from which its address under either key follows.
func (s *store) ResealState() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unread != nil || s.unwritten != nil || s.broken != nil {
		return nil, errors.New("waffle: storage is behind the store's state; start it and stop it cleanly first")
	}
	b := binary.AppendUvarint(nil, uint64(len(s.objs)))
	for rf, o := range s.objs {
		b = binary.AppendUvarint(appendRef(b, rf), o.ts)
	}
	return b, nil
}

// resealer moves every object (kv.Resealer) from its address under the
// old key to its address under the new one (objectAddr), sealed bound to
// it.
type resealer struct {
	env kv.ResealEnv
	to  map[string]string // an object's address under From, or under To: its address under To
}

func newResealer(env kv.ResealEnv) (kv.Resealer, error) {
	r := resealer{env: env, to: map[string]string{}}
	d := delta.NewDecoder(env.State)
	for range d.Count() {
		rf := readRef(d)
		ts := d.Uvarint()
		dest := objectAddr(env.To, rf, ts)
		r.to[objectAddr(env.From, rf, ts)], r.to[dest] = dest, dest
	}
	if err := d.Done(); err != nil {
		return nil, fmt.Errorf("waffle: a malformed reseal state: %w", err)
	}
	return r, nil
}

func (r resealer) Reseal(addr string, stored []byte) (backend.Item, bool, error) {
	if !strings.HasPrefix(addr, ObjectPrefix) {
		return backend.Item{}, false, nil
	}
	dest, ok := r.to[addr]
	if !ok {
		return backend.Item{}, true, fmt.Errorf("%w: %q is no object of the store's state", kv.ErrTampered, addr)
	}
	plain, err := seal.OpenEither(r.env.From, r.env.To, []byte(addr), stored)
	if err != nil {
		return backend.Item{}, true, err
	}
	return backend.Item{Addr: dest, Value: r.env.To.Seal(nil, []byte(dest), plain)}, true, nil
}
