// Package resp serves a kv.Store over RESP, the Redis wire protocol, so that
// applications, redis-cli and redis-benchmark talk to oblivkv as they would
// to Redis.
//
// No RESP server library is reachable from the module proxy this project
// builds with (tidwall/redcon, tidwall/resp, secmask/go-redisproto and
// IceFireDB/redhub were refused), so the package carries its own small
// parser (parser.go: RESP arrays of bulk strings and inline commands, as
// Redis reads them) and writer (writer.go).
//
// # Commands
//
// The string commands: GET, SET key value [NX|XX] [GET], SETNX, GETSET,
// GETDEL, MGET, MSET, MSETNX, DEL, UNLINK, EXISTS (one key or several),
// INCR, DECR, INCRBY, DECRBY, INCRBYFLOAT, APPEND, STRLEN, TYPE; and DBSIZE,
// PING, ECHO, INFO, SELECT 0, QUIT, and the connection-level commands
// clients send on connect: HELLO, CLIENT, COMMAND, CONFIG GET and AUTH.
// Names are case-insensitive. A connection speaks RESP2 until HELLO 3 asks
// for RESP3 (redis-py 6 and later ask on connect), whose replies differ
// only in the null and in maps (HELLO, CONFIG GET, COMMAND DOCS).
//
// Each string command on one key is one kv.Update (or Get) of that key:
// atomic, and one access of the Store whatever it finds, so a missing key,
// a failed condition (SETNX of an existing key) or a value that is not a
// number costs storage what any GET costs (for protocols that apply
// mutations natively; see kv.Updater for the others). DEL and UNLINK are
// one delete per key, counting the keys that existed. MSETNX runs alone
// (kv.SetIfNoneExist): it reads every key and then sets every pair, or
// reads every key again, so its cost does not tell which happened.
//
// Commands that cannot be oblivious are refused with the reason, in one
// sentence: listing keys (KEYS, SCAN, RANDOMKEY), expiry (EXPIRE, TTL,
// SETEX, SET EX/PX/KEEPTTL, ...: keys never expire) and publish/subscribe.
// Every other command is answered as Redis answers an unknown one.
//
// MSET, MGET, DEL and EXISTS run one Store call after the other, not as a
// transaction: if a Put of MSET fails (value too large, store full), the
// pairs before it stay written and the error is replied; if a call of DEL
// fails, the keys before it stay deleted; a failed Get of MGET is answered
// by an error element in its place.
//
// # Authentication
//
// With Options.Users set (package auth: users with an argon2id hash or the
// default user's --requirepass, and a permission), a connection runs only
// PING, AUTH, HELLO and QUIT until AUTH password (as the default user),
// AUTH user password or HELLO 2 AUTH user password succeeds; anything else
// is answered "NOAUTH Authentication required.". A wrong password or
// unknown user is answered "WRONGPASS invalid username-password pair or
// user is disabled.", leaves the connection as it was, and is logged with
// the user name and the client's address, never the password. A read-only
// user runs only the commands listed as reads (auth.go); any other is
// answered "NOPERM User NAME has no permissions to run the 'CMD' command"
// before it reaches the store. TLS is the listener's: Serve a tls.Listener.
//
// # Errors
//
// Store errors become error replies: kv.ErrValueTooLarge "ERR value too
// large: ...", kv.ErrKeyTooLarge "ERR key too large: ...", kv.ErrFull
// "ERR store full: ...", kv.ErrTampered "ERR storage integrity check
// failed", kv.ErrFenced "ERR fenced out: ..." (logged: the operator must
// know), kv.ErrUnavailable "ERR unavailable: ..." (logged; a cluster's
// layer gave the request up, and a write's outcome is unknown),
// kv.ErrClosed "ERR server shutting down", and the errors of
// mutations that do not apply (kv.ErrNotInteger, kv.ErrOverflow, ...) the
// texts Redis gives them. Any other error is
// logged and replied as "ERR internal error": its text is not sent to
// clients. All use the ERR prefix, so clients that only know Redis's
// prefixes handle them. Nothing the server logs contains keys or values.
//
// # Limits
//
// Options bounds what one client may make the server hold (see Options for
// the defaults). A request over a limit is rejected from its header, before
// its body is read, with "ERR Protocol error: ..." as Redis words it, and
// the connection is closed; other clients are unaffected.
//
// # Performance
//
// Each connection has one buffered reader and writer; replies are flushed
// only when no further request is already buffered, so pipelined requests
// are answered in one write. Commands of one connection run one after the
// other and are answered in order.
package resp
