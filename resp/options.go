package resp

import (
	"log/slog"
	"time"

	"github.com/oblivkv/oblivkv/auth"
)

// Defaults for Options fields left zero (or negative).
const (
	// DefaultMaxBulkLen is 64 MiB, the largest value size kv.Open accepts
	// (Redis allows 512 MiB, which oblivkv could never store).
	DefaultMaxBulkLen = 64 << 20
	// DefaultMaxArrayLen is Redis's own bound on a request's arguments.
	DefaultMaxArrayLen = 1 << 20
	// DefaultMaxInlineLen is Redis's bound on an inline request line.
	DefaultMaxInlineLen = 64 << 10
	// DefaultMaxRequestLen bounds the argument bytes of one request: room
	// for an MSET of a few values of the largest size.
	DefaultMaxRequestLen = 128 << 20
	// DefaultMaxClients is Redis's default maxclients.
	DefaultMaxClients = 10000
	// DefaultVersion is reported when Options.Version is empty.
	DefaultVersion = "dev"
)

// Options configures a Server. The zero value is usable.
type Options struct {
	// MaxBulkLen is the largest argument, in bytes (default 64 MiB). A
	// larger bulk string is refused from its header, before its body is
	// read. Values are also bounded by the store's value size, which
	// replies "ERR value too large".
	MaxBulkLen int
	// MaxArrayLen is the most arguments one request may have (default 1M).
	MaxArrayLen int
	// MaxInlineLen is the longest inline request line (default 64 KiB).
	MaxInlineLen int
	// MaxRequestLen bounds the total argument bytes of one request
	// (default 128 MiB).
	MaxRequestLen int
	// MaxClients is the most connections served at once (default 10000);
	// one more is answered "ERR max number of clients reached" and closed.
	MaxClients int
	// IdleTimeout, if positive, closes a connection that has not completed
	// a request for this long. Zero means never.
	IdleTimeout time.Duration
	// Logger receives the server's logs (default slog.Default()). Keys and
	// values are never logged.
	Logger *slog.Logger
	// Version is the oblivkv version INFO and HELLO report
	// (default "dev").
	Version string
	// Info, if set, is called on every INFO and adds its sections to the
	// reply. A section named like a built-in one (e.g. "Oblivkv", for the
	// deployment's settings) extends it (in the Oblivkv section, after the
	// store's parameters and before its traffic); others are appended.
	Info func() []InfoSection
	// Users, if set, are who may connect: a connection must AUTH (or
	// HELLO with AUTH) as one of them before it may run anything but PING,
	// AUTH, HELLO and QUIT, and a read-only user runs only the commands
	// that leave the store unchanged. Nil means no authentication: every
	// connection is the default user with every permission.
	Users *auth.Users
	// Observe, if set, is called after every command with its name (one of
	// CommandNames, or UnknownCommand) and how long it ran, from its parse
	// to its reply being buffered. It is never given a key or a value.
	// It is called from the connections' goroutines, concurrently.
	Observe func(command string, took time.Duration)
}

// InfoSection is one "# Name" section of an INFO reply.
type InfoSection struct {
	Name   string
	Fields []InfoField
}

// InfoField is one "key:value" line of an INFO section.
type InfoField struct {
	Key, Value string
}

func (o Options) withDefaults() Options {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.MaxBulkLen, DefaultMaxBulkLen)
	def(&o.MaxArrayLen, DefaultMaxArrayLen)
	def(&o.MaxInlineLen, DefaultMaxInlineLen)
	def(&o.MaxRequestLen, DefaultMaxRequestLen)
	def(&o.MaxClients, DefaultMaxClients)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Version == "" {
		o.Version = DefaultVersion
	}
	return o
}

func (o Options) limits() limits {
	return limits{bulk: o.MaxBulkLen, array: o.MaxArrayLen, inline: o.MaxInlineLen,
		request: o.MaxRequestLen}
}
