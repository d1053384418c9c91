// Package auth decides who may use an oblivkv server: it owns the users
// (a name, a secret and a permission), the users file format, password
// hashing and the comparison of a password given by a client with the
// secret a user has.
//
// A user's secret is either an argon2id hash (the users file; see Hash) or
// the SHA-256 of a password held in memory (--requirepass, which sets the
// "default" user's password). Both are compared in constant time: the
// argon2id key with crypto/subtle after deriving it from the password given,
// and a password for the "default" user by comparing SHA-256 digests, so
// the time does not depend on the password's length or on where it differs.
// A name that no user has is checked against a dummy hash with the same
// cost as a real one, so a client cannot tell an unknown name from a wrong
// password by the time of the answer.
//
// Deriving an argon2id key takes memory (19 MiB with the default
// parameters) and CPU; Users lets at most GOMAXPROCS derivations run at
// once, so a flood of AUTH attempts queues rather than exhausting memory.
//
// It never logs, prints or keeps a password given to it.
package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
)

// DefaultUser is the user that a one-argument AUTH authenticates as, and
// whose password --requirepass sets, as in Redis.
const DefaultUser = "default"

// Permission is what a user may do.
type Permission int

const (
	// ReadWrite users run every command.
	ReadWrite Permission = iota
	// ReadOnly users run only the commands that do not change the store.
	ReadOnly
)

// String returns the permission as the users file writes it.
func (p Permission) String() string {
	if p == ReadOnly {
		return "read-only"
	}
	return "read-write"
}

// ParsePermission parses "read-write" or "read-only".
func ParsePermission(s string) (Permission, error) {
	switch s {
	case "read-write":
		return ReadWrite, nil
	case "read-only":
		return ReadOnly, nil
	}
	return 0, fmt.Errorf("permission %q: want read-write or read-only", s)
}

// User is an authenticated user: its name and what it may do.
type User struct {
	Name string
	Perm Permission
}

// secret is what a user's password is checked against.
type secret interface {
	matches(password []byte) bool
}

// digest is the SHA-256 of a password held in memory (--requirepass).
type digest [sha256.Size]byte

func (d digest) matches(password []byte) bool {
	given := sha256.Sum256(password)
	return subtle.ConstantTimeCompare(given[:], d[:]) == 1
}

type entry struct {
	user   User
	secret secret
}

// Users is a set of users. Its methods may be called concurrently once it
// is built (Add, AddPassword and the parsers are not safe to call while
// Authenticate runs).
type Users struct {
	byName map[string]entry
	dummy  *hash         // checked for unknown names; the cost of a real hash
	slots  chan struct{} // bounds concurrent argon2id derivations
}

// NewUsers returns an empty set of users.
func NewUsers() *Users {
	return &Users{byName: map[string]entry{}, slots: make(chan struct{}, runtime.GOMAXPROCS(0))}
}

// Add adds a user whose password has the argon2id hash encoded (as Hash
// returns it).
func (u *Users) Add(name string, perm Permission, encoded string) error {
	h, err := parseHash(encoded)
	if err != nil {
		return fmt.Errorf("user %q: %w", name, err)
	}
	if err := u.add(name, perm, h); err != nil {
		return err
	}
	if u.dummy == nil {
		u.dummy = h.decoy()
	}
	return nil
}

// AddPassword adds a user whose password is kept in memory as its SHA-256
// digest: --requirepass, for the default user.
func (u *Users) AddPassword(name string, perm Permission, password string) error {
	if password == "" {
		return fmt.Errorf("user %q: empty password", name)
	}
	return u.add(name, perm, digest(sha256.Sum256([]byte(password))))
}

func (u *Users) add(name string, perm Permission, s secret) error {
	if err := checkName(name); err != nil {
		return err
	}
	if _, dup := u.byName[name]; dup {
		return fmt.Errorf("user %q is defined twice", name)
	}
	u.byName[name] = entry{User{name, perm}, s}
	return nil
}

// checkName accepts the names the users file can hold: printable ASCII
// without spaces.
func checkName(name string) error {
	if name == "" {
		return errors.New("empty user name")
	}
	for i := 0; i < len(name); i++ {
		if name[i] <= ' ' || name[i] > '~' {
			return fmt.Errorf("user name %q: only printable ASCII without spaces", name)
		}
	}
	return nil
}

// Len returns the number of users.
func (u *Users) Len() int { return len(u.byName) }

// Names returns the users' names, sorted.
func (u *Users) Names() []string {
	return slices.Sorted(maps.Keys(u.byName))
}

// Authenticate returns the user named name if password is its password.
func (u *Users) Authenticate(name string, password []byte) (User, bool) {
	e, known := u.byName[name]
	s := e.secret
	if !known {
		if u.dummy == nil { // no hashes: nothing costly to imitate
			return User{}, false
		}
		s = u.dummy
	}
	if _, costly := s.(*hash); costly {
		u.slots <- struct{}{}
		defer func() { <-u.slots }()
	}
	if ok := s.matches(password); !ok || !known {
		return User{}, false
	}
	return e.user, true
}

// FormatLine returns the users file line of a user.
func FormatLine(name string, perm Permission, encoded string) string {
	return strings.Join([]string{name, perm.String(), encoded}, " ")
}
