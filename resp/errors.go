package resp

import (
	"context"
	"errors"
	"strings"

	"github.com/oblivkv/oblivkv/kv"
)

// storeErr writes the reply to a failed Store call.
func (c *conn) storeErr(err error) {
	reply, internal := errorReply(err)
	if internal {
		// Protocols' errors do not carry keys or values; the reply does not
		// carry the error at all.
		c.s.log.Error("resp: store call failed", "client", c.id, "err", err)
	}
	c.wr.err(reply)
}

// errorReply maps a Store error to its reply, and reports whether the error
// was unexpected (worth logging).
func errorReply(err error) (reply string, internal bool) {
	switch {
	case errors.Is(err, kv.ErrValueTooLarge):
		return "ERR value too large: " + oneLine(err), false
	case errors.Is(err, kv.ErrKeyTooLarge):
		return "ERR key too large: " + oneLine(err), false
	case kv.RejectionOf(err) != 0: // Redis's texts
		return "ERR " + kv.RejectionOf(err).Err().Error(), false
	case errors.Is(err, kv.ErrFull):
		return "ERR store full: no room for a new key", false
	case errors.Is(err, kv.ErrTampered):
		return "ERR storage integrity check failed", true
	case errors.Is(err, kv.ErrFenced):
		return "ERR fenced out: another process has taken over this store's storage", true
	case errors.Is(err, kv.ErrUnavailable):
		return "ERR unavailable: the request did not complete; a write's outcome is unknown, read the key before writing it again", true
	case errors.Is(err, kv.ErrClosed), errors.Is(err, context.Canceled):
		return "ERR server shutting down", false
	}
	return "ERR internal error", true
}

// oneLine is the text of a size error, made of kv's fixed messages and the
// sizes, on one line (errors.Join puts one error per line).
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}
