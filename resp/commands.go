package resp

import (
	"maps"
	"slices"
	"strings"
	"time"
)

// command is one entry of the dispatch table.
type command struct {
	name string // lowercase, as Redis names it in errors
	// arity counts the arguments with the command name, as Redis does:
	// n > 0 means exactly n, n < 0 at least -n.
	arity int
	run   func(c *conn, args [][]byte)
}

// commands maps lowercase command names to their entries. It is filled in
// init, as COMMAND COUNT refers to it.
var commands map[string]*command

func init() {
	table := []command{
		{"get", 2, cmdGet},
		{"set", -3, cmdSet},
		{"del", -2, cmdDel},
		{"unlink", -2, cmdDel},
		{"incr", 2, cmdIncr},
		{"decr", 2, cmdDecr},
		{"incrby", 3, cmdIncrBy},
		{"decrby", 3, cmdDecrBy},
		{"incrbyfloat", 3, cmdIncrByFloat},
		{"append", 3, cmdAppend},
		{"strlen", 2, cmdStrlen},
		{"type", 2, cmdType},
		{"setnx", 3, cmdSetNX},
		{"getset", 3, cmdGetSet},
		{"getdel", 2, cmdGetDel},
		{"msetnx", -3, cmdMSetNX},
		{"exists", -2, cmdExists},
		{"mget", -2, cmdMGet},
		{"mset", -3, cmdMSet},
		{"dbsize", 1, cmdDBSize},
		{"ping", -1, cmdPing},
		{"echo", 2, cmdEcho},
		{"quit", -1, cmdQuit},
		{"select", 2, cmdSelect},
		{"info", -1, cmdInfo},
		{"hello", -1, cmdHello},
		{"auth", -2, cmdAuth},
		{"client", -2, cmdClient},
		{"command", -1, cmdCommand},
		{"config", -2, cmdConfig},
	}
	commands = make(map[string]*command, len(table))
	for i := range table {
		commands[table[i].name] = &table[i]
	}
}

// UnknownCommand is the name Options.Observe is given for a command the
// server does not have.
const UnknownCommand = "unknown"

// CommandNames returns the lowercase names of the commands the server
// runs, sorted: the names Options.Observe is given, besides UnknownCommand.
func CommandNames() []string {
	return slices.Sorted(maps.Keys(commands))
}

func (cmd *command) arityOK(n int) bool {
	if cmd.arity >= 0 {
		return n == cmd.arity
	}
	return n >= -cmd.arity
}

// exec runs one request.
func (c *conn) exec(args [][]byte) {
	c.s.cmdsN.Add(1)
	observe := c.s.opts.Observe
	var began time.Time
	if observe != nil {
		began = time.Now()
	}
	cmd := c.lookup(args[0])
	switch {
	case c.denied(cmd):
	case cmd == nil:
		if !c.refused(args[0]) {
			c.wr.err(unknownCommand(args))
		}
	case !cmd.arityOK(len(args)):
		c.arityErr(cmd.name)
	default:
		cmd.run(c, args)
	}
	if observe != nil {
		name := UnknownCommand
		if cmd != nil {
			name = cmd.name
		}
		observe(name, time.Since(began))
	}
}

// lookup finds a command by name, case-insensitively, without allocating.
func (c *conn) lookup(name []byte) *command {
	if len(name) > len(c.low) {
		return nil
	}
	low := c.low[:len(name)]
	for i, b := range name {
		low[i] = lower(b)
	}
	return commands[string(low)]
}

func (c *conn) arityErr(name string) {
	c.wr.err("ERR wrong number of arguments for '" + name + "' command")
}

// unknownCommand words the reply to an unknown command as Redis 7 does:
// the name and the first arguments, up to about 128 bytes of them.
func unknownCommand(args [][]byte) string {
	var quoted []byte
	for _, a := range args[1:] {
		if len(quoted) >= 128 {
			break
		}
		room := 128 - len(quoted)
		quoted = append(quoted, '\'')
		quoted = append(quoted, clip(a, room)...)
		quoted = append(quoted, '\'', ' ')
	}
	return "ERR unknown command '" + string(clip(args[0], 128)) +
		"', with args beginning with: " + string(quoted)
}

// unknownSubcommand words the reply to an unknown subcommand as Redis does.
func (c *conn) unknownSubcommand(args [][]byte) {
	c.wr.err("ERR unknown subcommand '" + string(clip(args[1], 128)) +
		"'. Try " + strings.ToUpper(string(args[0])) + " HELP.")
}

func clip(b []byte, n int) []byte { return b[:min(len(b), n)] }

func lower(b byte) byte {
	if b >= 'A' && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}

// is reports whether b equals the lowercase ASCII word s, ignoring case.
func is(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		if lower(b[i]) != s[i] {
			return false
		}
	}
	return true
}
