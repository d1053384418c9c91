package resp

import (
	"bytes"
	"math"
	"strconv"
	"strings"

	"github.com/oblivkv/oblivkv/kv"
)

// Redis's string commands. Each is one kv.Update of its key, so it costs
// storage what a GET costs whatever it finds (a read-modify-write, a
// condition that fails, a missing key), and it is atomic per key.

// update runs m on key, or writes the error reply and returns false.
func (c *conn) update(key []byte, m kv.Mutation) (kv.Result, bool) {
	r, err := kv.Update(c.s.ctx, c.s.store, string(key), m)
	if err != nil {
		c.storeErr(err)
		return r, false
	}
	return r, true
}

func cmdIncr(c *conn, args [][]byte) { c.incrBy(args[1], []byte("1")) }
func cmdDecr(c *conn, args [][]byte) { c.incrBy(args[1], []byte("-1")) }
func cmdIncrBy(c *conn, args [][]byte) {
	if _, err := kv.ParseInteger(args[2]); err != nil {
		c.storeErr(err)
		return
	}
	c.incrBy(args[1], args[2])
}

func cmdDecrBy(c *conn, args [][]byte) {
	n, err := kv.ParseInteger(args[2])
	switch {
	case err != nil:
		c.storeErr(err)
	case n == math.MinInt64:
		c.wr.err("ERR decrement would overflow")
	default:
		c.incrBy(args[1], strconv.AppendInt(nil, -n, 10))
	}
}

func (c *conn) incrBy(key, delta []byte) {
	if r, ok := c.update(key, kv.Mutation{Op: kv.MutIncrBy, Arg: delta}); ok {
		n, _ := kv.ParseInteger(r.New)
		c.wr.integer(n)
	}
}

func cmdIncrByFloat(c *conn, args [][]byte) {
	if _, err := kv.ParseFloat(args[2]); err != nil {
		c.storeErr(err)
		return
	}
	m := kv.Mutation{Op: kv.MutIncrByFloat, Arg: bytes.Clone(args[2])}
	if r, ok := c.update(args[1], m); ok {
		c.wr.bulk(r.New)
	}
}

func cmdAppend(c *conn, args [][]byte) {
	if r, ok := c.update(args[1], kv.Mutation{Op: kv.MutAppend, Arg: bytes.Clone(args[2])}); ok {
		c.wr.integer(int64(r.Len))
	}
}

func cmdStrlen(c *conn, args [][]byte) {
	if r, ok := c.update(args[1], kv.Mutation{Op: kv.MutRead}); ok {
		c.wr.integer(int64(len(r.Old)))
	}
}

func cmdType(c *conn, args [][]byte) {
	if r, ok := c.update(args[1], kv.Mutation{Op: kv.MutRead}); ok {
		typ := "none"
		if r.Found {
			typ = "string"
		}
		c.wr.simple(typ)
	}
}

func cmdSetNX(c *conn, args [][]byte) {
	m := kv.Mutation{Op: kv.MutSet, Arg: bytes.Clone(args[2]), If: kv.IfMissing}
	if r, ok := c.update(args[1], m); ok {
		c.wr.integer(oneIf(r.Written))
	}
}

func cmdGetSet(c *conn, args [][]byte) {
	m := kv.Mutation{Op: kv.MutSet, Arg: bytes.Clone(args[2]), ReturnOld: true}
	if r, ok := c.update(args[1], m); ok {
		c.writeValue(r.Old, r.Found, nil)
	}
}

func cmdGetDel(c *conn, args [][]byte) {
	if r, ok := c.update(args[1], kv.Mutation{Op: kv.MutDelete, ReturnOld: true}); ok {
		c.writeValue(r.Old, r.Found, nil)
	}
}

// cmdSet runs SET key value [NX|XX] [GET]. The expiry options are refused:
// keys never expire (see refusals).
func cmdSet(c *conn, args [][]byte) {
	m := kv.Mutation{Op: kv.MutSet, Arg: bytes.Clone(args[2])}
	for _, opt := range args[3:] {
		switch {
		case is(opt, "nx") && m.If == kv.IfAlways:
			m.If = kv.IfMissing
		case is(opt, "xx") && m.If == kv.IfAlways:
			m.If = kv.IfExists
		case is(opt, "get"):
			m.ReturnOld = true
		case isExpiry(opt):
			c.wr.err("ERR SET " + strings.ToUpper(string(opt)) + " " + noExpiry)
			return
		default:
			c.wr.err("ERR syntax error")
			return
		}
	}
	r, ok := c.update(args[1], m)
	switch {
	case !ok:
	case m.ReturnOld:
		c.writeValue(r.Old, r.Found, nil)
	case r.Written:
		c.wr.simple("OK")
	default:
		c.wr.null()
	}
}

func isExpiry(opt []byte) bool {
	return is(opt, "ex") || is(opt, "px") || is(opt, "exat") || is(opt, "pxat") || is(opt, "keepttl")
}

// cmdMSetNX sets every pair if none of the keys exists, as one step.
func cmdMSetNX(c *conn, args [][]byte) {
	if len(args)%2 == 0 {
		c.arityErr("msetnx")
		return
	}
	pairs := make([]kv.Pair, 0, len(args)/2)
	for i := 1; i < len(args); i += 2 {
		pairs = append(pairs, kv.Pair{Key: string(args[i]), Value: bytes.Clone(args[i+1])})
	}
	set, err := kv.SetIfNoneExist(c.s.ctx, c.s.store, pairs)
	if err != nil {
		c.storeErr(err)
		return
	}
	c.wr.integer(oneIf(set))
}

// Commands oblivkv refuses, each with the reason a user is given.
const (
	noExpiry  = "is not supported by oblivkv: keys never expire, because expiring one at its time would show storage when that key is touched"
	noListing = "is not supported by oblivkv: it lists no key names to clients (a listing, or a walk over storage, would reveal which keys exist); oblivkv dump exports a stopped store"
	noPubSub  = "is not supported by oblivkv: it stores keys and values only; use a message broker for publish/subscribe"
)

// refusals maps each refused command to its reason.
var refusals = map[string]string{
	"keys": noListing, "scan": noListing, "randomkey": noListing,
	"expire": noExpiry, "pexpire": noExpiry, "expireat": noExpiry, "pexpireat": noExpiry,
	"ttl": noExpiry, "pttl": noExpiry, "persist": noExpiry, "expiretime": noExpiry,
	"pexpiretime": noExpiry, "setex": noExpiry, "psetex": noExpiry, "getex": noExpiry,
	"subscribe": noPubSub, "psubscribe": noPubSub, "ssubscribe": noPubSub, "publish": noPubSub,
	"spublish": noPubSub, "unsubscribe": noPubSub, "punsubscribe": noPubSub, "pubsub": noPubSub,
}

// refused writes the reply to a refused command; false if name is not one.
func (c *conn) refused(name []byte) bool {
	reason, ok := refusals[strings.ToLower(string(name))]
	if ok {
		c.wr.err("ERR " + strings.ToUpper(string(name)) + " " + reason)
	}
	return ok
}

// oneIf is Redis's integer reply of a yes-or-no answer.
func oneIf(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
