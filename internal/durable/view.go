package durable

import "github.com/oblivkv/oblivkv/observe"

// IsAnchorWrite reports whether r, a call storage saw, is a checkpoint's
// anchor write: the one call of a journaled store outside its protocol's
// layout, which a protocol's view of storage leaves out.
func IsAnchorWrite(r observe.Record) bool {
	return r.Op == observe.OpWrite && len(r.Addrs) == 1 && r.Addrs[0] == AnchorAddr
}
