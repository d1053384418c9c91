// Package resp serves a kv.Store over RESP2, the Redis wire protocol, so that
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
// GET, SET key value, DEL, MGET, MSET, EXISTS, DBSIZE, PING, ECHO, INFO,
// SELECT 0, QUIT, and the connection-level commands clients send on
// connect: HELLO (RESP2 only), CLIENT, COMMAND, CONFIG GET and AUTH (no
// password is configured). Names are case-insensitive. Every other command
// is answered as Redis answers an unknown one.
//
// SET takes no options: expiry and conditional writes (EX, PX, NX, XX,
// KEEPTTL, GET...) are answered with "ERR SET option 'EX' is not supported
// by oblivkv", never silently ignored.
//
// DEL and EXISTS reply with counts, as Redis does. The Store has no
// "exists" call, so the server Gets each key first (and DEL then Deletes
// every key, existing or not). Each of these is an ordinary oblivious
// access of the Store, so the counts leak nothing to the storage operator
// that the accesses themselves do not; the cost is one extra access per key
// for DEL. The Get and the Delete are two operations, so the count of a DEL
// racing with a SET of the same key from another client reflects one
// linearization of the two, not necessarily the final state.
//
// MSET, MGET, DEL and EXISTS run one Store call after the other, not as a
// transaction: if a Put of MSET fails (value too large, store full), the
// pairs before it stay written and the error is replied; if a call of DEL
// fails, the keys before it stay deleted; a failed Get of MGET is answered
// by an error element in its place.
//
// # Errors
//
// Store errors become error replies: kv.ErrValueTooLarge "ERR value too
// large: ...", kv.ErrKeyTooLarge "ERR key too large: ...", kv.ErrFull
// "ERR store full: ...", kv.ErrTampered "ERR storage integrity check
// failed", kv.ErrClosed "ERR server shutting down". Any other error is
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
