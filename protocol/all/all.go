// Package all registers every protocol with package kv. Import it for its
// side effect:
//
//	import _ "github.com/oblivkv/oblivkv/protocol/all"
package all

import (
	_ "github.com/oblivkv/oblivkv/protocol/baseline" // plain, encrypted
	_ "github.com/oblivkv/oblivkv/protocol/cloak"
	_ "github.com/oblivkv/oblivkv/protocol/oblivistore"
	_ "github.com/oblivkv/oblivkv/protocol/pathoram"
	_ "github.com/oblivkv/oblivkv/protocol/taostore"
	_ "github.com/oblivkv/oblivkv/protocol/treebeard"
	_ "github.com/oblivkv/oblivkv/protocol/waffle"
)
