package resp

import (
	"bytes"

	"github.com/oblivkv/oblivkv/kv"
)

// The data commands: each is one or more Store calls.

func cmdGet(c *conn, args [][]byte) {
	val, ok, err := c.s.store.Get(c.s.ctx, string(args[1]))
	c.writeValue(val, ok, err)
}

// writeValue writes the reply to one Get.
func (c *conn) writeValue(val []byte, ok bool, err error) {
	switch {
	case err != nil:
		c.storeErr(err)
	case !ok:
		c.wr.null()
	default:
		c.wr.bulk(val)
	}
}

// put stores key=val, or writes the error reply and returns false.
func (c *conn) put(key, val []byte) bool {
	// The arguments are reused for the next request, and the Store
	// contract does not say whether Put may keep val: it gets a copy.
	if err := c.s.store.Put(c.s.ctx, string(key), bytes.Clone(val)); err != nil {
		c.storeErr(err)
		return false
	}
	return true
}

// cmdMSet runs MSET k1 v1 k2 v2..., one Put after the other; a failed Put
// ends it, and the pairs before it stay written.
func cmdMSet(c *conn, args [][]byte) {
	if len(args)%2 == 0 {
		c.arityErr("mset")
		return
	}
	for i := 1; i < len(args); i += 2 {
		if !c.put(args[i], args[i+1]) {
			return
		}
	}
	c.wr.simple("OK")
}

// cmdMGet streams one Get per key; a failed Get is answered by an error
// element in its position, as RESP2 allows.
func cmdMGet(c *conn, args [][]byte) {
	c.wr.array(len(args) - 1)
	for _, key := range args[1:] {
		val, ok, err := c.s.store.Get(c.s.ctx, string(key))
		c.writeValue(val, ok, err)
	}
}

// cmdDel deletes each key, counting those that existed: one access per
// key, whether it existed or not.
func cmdDel(c *conn, args [][]byte) {
	var n int64
	for _, key := range args[1:] {
		r, ok := c.update(key, kv.Mutation{Op: kv.MutDelete})
		if !ok {
			return
		}
		if r.Found {
			n++
		}
	}
	c.wr.integer(n)
}

// cmdExists counts the keys that exist, a key named twice counting twice.
func cmdExists(c *conn, args [][]byte) {
	var n int64
	for _, key := range args[1:] {
		_, ok, err := c.s.store.Get(c.s.ctx, string(key))
		if err != nil {
			c.storeErr(err)
			return
		}
		if ok {
			n++
		}
	}
	c.wr.integer(n)
}

func cmdDBSize(c *conn, _ [][]byte) { c.wr.integer(c.s.store.Stats().Keys) }
