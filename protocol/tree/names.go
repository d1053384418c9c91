package tree

import "github.com/oblivkv/oblivkv/kv"

// MaxNameSize bounds a key's name as a journal record or a checkpoint
// holds it: kv's largest maximum key size.
const MaxNameSize = 64 << 10

// NamedKeys returns the names of the blocks a position map holds, from
// names (block -> its key), for kv.KeyLister. A block without a name (its
// key stored by an earlier build, which kept no names) makes it name none:
// kv.ErrKeysUnnamed.
func NamedKeys[P any](pos map[BlockID]P, names map[BlockID]string) ([]string, error) {
	keys := make([]string, 0, len(pos))
	for id := range pos {
		name, ok := names[id]
		if !ok {
			return nil, kv.ErrKeysUnnamed
		}
		keys = append(keys, name)
	}
	return keys, nil
}
