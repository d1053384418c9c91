package resp

import (
	"bytes"
	"strings"
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

// cmdSet runs SET key value. Every option is refused: the Store has
// neither expiry nor conditional writes.
func cmdSet(c *conn, args [][]byte) {
	if len(args) > 3 {
		c.wr.err("ERR SET option '" + strings.ToUpper(string(clip(args[3], 64))) +
			"' is not supported by oblivkv")
		return
	}
	if c.put(args[1], args[2]) {
		c.wr.simple("OK")
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

// cmdDel Gets each key, to count those that existed, then Deletes it
// whether it existed or not, so that the Store calls do not depend on
// existence.
func cmdDel(c *conn, args [][]byte) { c.countExisting(args[1:], true) }

// cmdExists counts the keys that exist, a key named twice counting twice.
func cmdExists(c *conn, args [][]byte) { c.countExisting(args[1:], false) }

func (c *conn) countExisting(keys [][]byte, del bool) {
	var n int64
	for _, k := range keys {
		key := string(k)
		_, ok, err := c.s.store.Get(c.s.ctx, key)
		if err == nil && del {
			err = c.s.store.Delete(c.s.ctx, key)
		}
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
