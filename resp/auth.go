package resp

import (
	"github.com/oblivkv/oblivkv/auth"
)

// Authentication, as Redis answers it. With no Options.Users every
// connection is the default user, with every permission, from the start.

const (
	errNoPassword  = "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"
	errWrongPass   = "WRONGPASS invalid username-password pair or user is disabled."
	errNoAuth      = "NOAUTH Authentication required."
	errHelloNoAuth = "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"
)

// beforeAuth are the commands a connection may run before it is
// authenticated.
var beforeAuth = map[string]bool{"ping": true, "auth": true, "hello": true, "quit": true}

// readOnly are the commands a read-only user may run: those that do not
// change the store. A command not listed is refused to read-only users, so
// a new command is a write until it is added here
// (TestEveryCommandIsReadOrWrite makes each command one or the other).
var readOnly = map[string]bool{
	"get": true, "mget": true, "exists": true, "dbsize": true, "strlen": true, "type": true,
	"ping": true, "echo": true, "quit": true, "select": true, "info": true,
	"hello": true, "auth": true, "client": true, "command": true, "config": true,
}

// defaultUser is every connection's user when the server has no users.
var defaultUser = auth.User{Name: auth.DefaultUser, Perm: auth.ReadWrite}

// initAuth authenticates a new connection as the default user when the
// server requires no authentication.
func (c *conn) initAuth() {
	if c.s.opts.Users == nil {
		c.user, c.authenticated = defaultUser, true
	}
}

// denied answers a command the connection may not run and reports whether
// it did: before authentication anything but PING, AUTH, HELLO and QUIT
// (NOAUTH, also for unknown commands), and for a read-only user any
// command not known to leave the store unchanged (NOPERM).
func (c *conn) denied(cmd *command) bool {
	switch {
	case !c.authenticated && (cmd == nil || !beforeAuth[cmd.name]):
		c.wr.err(errNoAuth)
	case cmd != nil && c.user.Perm == auth.ReadOnly && !readOnly[cmd.name]:
		c.wr.err("NOPERM User " + c.user.Name + " has no permissions to run the '" + cmd.name + "' command")
	default:
		return false
	}
	return true
}

// cmdAuth runs AUTH password (as the default user) and AUTH user password.
func cmdAuth(c *conn, args [][]byte) {
	switch {
	case len(args) > 3:
		c.arityErr("auth")
	case c.s.opts.Users == nil:
		c.wr.err(errNoPassword)
	case len(args) == 2 && c.login([]byte(auth.DefaultUser), args[1]):
		c.wr.simple("OK")
	case len(args) == 3 && c.login(args[1], args[2]):
		c.wr.simple("OK")
	default:
		c.wr.err(errWrongPass)
	}
}

// helloAuth applies HELLO's AUTH option (creds is its user and password,
// or nil), or writes the error and returns false. Without the option, the
// connection must be authenticated already.
func (c *conn) helloAuth(creds [][]byte) bool {
	switch {
	case creds == nil && c.authenticated:
		return true
	case creds == nil:
		c.wr.err(errHelloNoAuth)
	case c.s.opts.Users == nil:
		c.wr.err(errNoPassword)
	case c.login(creds[0], creds[1]):
		return true
	default:
		c.wr.err(errWrongPass)
	}
	return false
}

// login authenticates the connection as name if password is its password.
// A failure is logged with the name and the client's address, never the
// password, and leaves the connection as it was.
func (c *conn) login(name, password []byte) bool {
	user, ok := c.s.opts.Users.Authenticate(string(name), password)
	if !ok {
		c.s.log.Warn("resp: authentication failed", "user", string(clip(name, 64)),
			"client", c.id, "addr", c.nc.RemoteAddr().String())
		return false
	}
	c.user, c.authenticated = user, true
	return true
}
