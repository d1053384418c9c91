package resp

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
)

// The connection and server commands clients and tools send, answered
// without the Store.

func cmdPing(c *conn, args [][]byte) {
	switch len(args) {
	case 1:
		c.wr.simple("PONG")
	case 2:
		c.wr.bulk(args[1])
	default:
		c.arityErr("ping")
	}
}

func cmdEcho(c *conn, args [][]byte) { c.wr.bulk(args[1]) }

func cmdQuit(c *conn, _ [][]byte) {
	c.wr.simple("OK")
	c.quit = true
}

// cmdSelect accepts only database 0, the only one there is.
func cmdSelect(c *conn, args [][]byte) {
	switch n, ok := parseInt(args[1]); {
	case !ok:
		c.wr.err("ERR value is not an integer or out of range")
	case n != 0:
		c.wr.err("ERR DB index is out of range")
	default:
		c.wr.simple("OK")
	}
}

// cmdHello negotiates the protocol, RESP2 or RESP3 (others are refused
// with NOPROTO), applies its options and replies the server's map. The
// connection changes protocol only when all of HELLO succeeds, as Redis's
// does; without a version it keeps its own.
func cmdHello(c *conn, args [][]byte) {
	resp3 := c.wr.resp3
	if len(args) > 1 {
		v, ok := c.helloVersion(args[1])
		if !ok {
			return
		}
		resp3 = v == 3
	}
	if c.helloOptions(args[min(2, len(args)):]) {
		c.wr.resp3 = resp3
		c.helloReply()
	}
}

// helloVersion returns protocol version 2 or 3, or writes the error.
func (c *conn) helloVersion(arg []byte) (int64, bool) {
	v, ok := parseInt(arg)
	switch {
	case !ok:
		c.wr.err("ERR Protocol version is not an integer or out of range")
	case v != 2 && v != 3:
		c.wr.err("NOPROTO sorry, this protocol version is not supported")
		ok = false
	}
	return v, ok
}

// helloOptions applies HELLO's AUTH and SETNAME options, or writes the
// error and returns false. A connection not authenticated must be
// authenticated by the AUTH option before the name is set.
func (c *conn) helloOptions(opts [][]byte) bool {
	name, setName := "", false
	var creds [][]byte // user and password of the AUTH option
	for i := 0; i < len(opts); i++ {
		switch left := len(opts) - i - 1; {
		case is(opts[i], "auth") && left >= 2:
			creds, i = [][]byte{opts[i+1], opts[i+2]}, i+2
		case is(opts[i], "setname") && left >= 1:
			i++
			name, setName = string(opts[i]), true
		default:
			c.wr.err("ERR Syntax error in HELLO option '" + string(clip(opts[i], 64)) + "'")
			return false
		}
	}
	if setName && !validName(name) {
		c.wr.err(errBadName)
		return false
	}
	if !c.helloAuth(creds) {
		return false
	}
	if setName {
		c.setName(name)
	}
	return true
}

func (c *conn) helloReply() {
	c.wr.mapHeader(7)
	c.wr.bulkString("server")
	c.wr.bulkString("oblivkv")
	c.wr.bulkString("version")
	c.wr.bulkString(c.s.opts.Version)
	c.wr.bulkString("proto")
	c.wr.integer(map[bool]int64{false: 2, true: 3}[c.wr.resp3])
	c.wr.bulkString("id")
	c.wr.integer(c.id)
	c.wr.bulkString("mode")
	c.wr.bulkString("standalone")
	c.wr.bulkString("role")
	c.wr.bulkString("master")
	c.wr.bulkString("modules")
	c.wr.array(0)
}

const errBadName = "ERR Client names cannot contain spaces, newlines or special characters."

// validName applies Redis's rule for client names: printable ASCII
// without spaces.
func validName(name string) bool {
	for i := 0; i < len(name); i++ {
		if name[i] <= ' ' || name[i] > '~' {
			return false
		}
	}
	return true
}

// cmdClient answers the CLIENT subcommands clients send on connect and
// operators use to look around.
func cmdClient(c *conn, args [][]byte) {
	sub, n := args[1], len(args)
	switch {
	case is(sub, "setname") && n == 3:
		c.clientSetName(string(args[2]))
	case is(sub, "getname") && n == 2:
		c.clientGetName()
	case is(sub, "id") && n == 2:
		c.wr.integer(c.id)
	case is(sub, "setinfo") && n == 4, (is(sub, "no-evict") || is(sub, "no-touch")) && n == 3:
		c.wr.simple("OK")
	case is(sub, "info") && n == 2:
		c.wr.bulkString(c.describe(time.Now()) + "\n")
	case is(sub, "list") && n == 2:
		c.clientList()
	case is(sub, "setname"), is(sub, "getname"), is(sub, "id"), is(sub, "setinfo"),
		is(sub, "no-evict"), is(sub, "no-touch"), is(sub, "info"), is(sub, "list"):
		c.arityErr("client|" + strings.ToLower(string(sub)))
	default:
		c.unknownSubcommand(args)
	}
}

func (c *conn) clientSetName(name string) {
	if !validName(name) {
		c.wr.err(errBadName)
		return
	}
	c.setName(name)
	c.wr.simple("OK")
}

func (c *conn) clientGetName() {
	if name := c.getName(); name != "" {
		c.wr.bulkString(name)
		return
	}
	c.wr.null()
}

func (c *conn) clientList() {
	var b strings.Builder
	now := time.Now()
	for _, other := range c.s.clients() {
		b.WriteString(other.describe(now))
		b.WriteByte('\n')
	}
	c.wr.bulkString(b.String())
}

// describe is the connection's line in CLIENT LIST.
func (c *conn) describe(now time.Time) string {
	idle := now.Sub(time.Unix(0, c.last.Load()))
	return fmt.Sprintf("id=%d addr=%s laddr=%s name=%s age=%d idle=%d db=0",
		c.id, c.nc.RemoteAddr(), c.nc.LocalAddr(), c.getName(),
		int64(now.Sub(c.created).Seconds()), int64(idle.Seconds()))
}

// cmdCommand answers enough of COMMAND for redis-cli: no command docs or
// details, and the number of commands.
func cmdCommand(c *conn, args [][]byte) {
	switch {
	case len(args) == 1:
		c.wr.array(0)
	case is(args[1], "docs"):
		c.wr.mapHeader(0)
	case is(args[1], "count") && len(args) == 2:
		c.wr.integer(int64(len(commands)))
	case is(args[1], "info"):
		c.wr.array(len(args) - 2)
		for range args[2:] {
			c.wr.nullArray()
		}
	default:
		c.unknownSubcommand(args)
	}
}

// cmdConfig answers CONFIG GET (redis-benchmark asks for "save" and
// "appendonly") from a few fixed parameters; CONFIG SET is not supported.
func cmdConfig(c *conn, args [][]byte) {
	if !is(args[1], "get") {
		c.unknownSubcommand(args)
		return
	}
	if len(args) < 3 {
		c.arityErr("config|get")
		return
	}
	var pairs []string
	for _, p := range c.configParams() {
		if matchAny(args[2:], p[0]) {
			pairs = append(pairs, p[0], p[1])
		}
	}
	c.wr.mapHeader(len(pairs) / 2)
	for _, s := range pairs {
		c.wr.bulkString(s)
	}
}

func (c *conn) configParams() [][2]string {
	o := c.s.opts
	return [][2]string{
		{"save", ""},
		{"appendonly", "no"},
		{"databases", "1"},
		{"maxclients", strconv.Itoa(o.MaxClients)},
		{"proto-max-bulk-len", strconv.Itoa(o.MaxBulkLen)},
		{"timeout", strconv.FormatInt(int64(o.IdleTimeout/time.Second), 10)},
	}
}

// matchAny reports whether name matches one of the glob patterns,
// case-insensitively.
func matchAny(patterns [][]byte, name string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(strings.ToLower(string(p)), name); ok {
			return true
		}
	}
	return false
}
