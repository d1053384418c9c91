package auth

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/argon2"
)

// Params are argon2id's cost parameters.
type Params struct {
	Memory  uint32 // KiB
	Time    uint32 // passes
	Threads uint8
}

// DefaultParams are OWASP's recommended minimum for argon2id: 19 MiB, two
// passes, one thread (about 25 ms on one core of a 2-core AMD EPYC VM).
var DefaultParams = Params{Memory: 19 * 1024, Time: 2, Threads: 1}

// Bounds on the parameters a hash may name, so that a mistyped users file
// cannot make every AUTH take gigabytes or minutes.
const (
	maxMemory  = 1 << 20 // KiB: 1 GiB
	maxTime    = 64
	saltLen    = 16
	keyLen     = 32
	minKeyLen  = 16
	maxKeyLen  = 64
	hashPrefix = "$argon2id$v=19$"
)

// hash is a decoded argon2id hash.
type hash struct {
	Params
	salt, key []byte
}

// Hash returns the argon2id hash of password with a fresh random salt and
// DefaultParams, in the PHC string format the users file holds:
// $argon2id$v=19$m=19456,t=2,p=1$SALT$KEY (unpadded base64).
func Hash(password []byte) (string, error) {
	return HashWith(password, DefaultParams)
}

// HashWith is Hash with explicit parameters.
func HashWith(password []byte, p Params) (string, error) {
	if err := p.check(); err != nil {
		return "", err
	}
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	h := hash{p, salt, p.derive(password, salt, keyLen)}
	return h.encode(), nil
}

func (p Params) derive(password, salt []byte, n int) []byte {
	return argon2.IDKey(password, salt, p.Time, p.Memory, p.Threads, uint32(n))
}

func (p Params) check() error {
	switch {
	case p.Memory < 8*uint32(p.Threads) || p.Memory > maxMemory:
		return fmt.Errorf("argon2id memory %d KiB: want 8*threads to %d", p.Memory, maxMemory)
	case p.Time < 1 || p.Time > maxTime:
		return fmt.Errorf("argon2id time %d: want 1 to %d", p.Time, maxTime)
	case p.Threads < 1:
		return errors.New("argon2id threads: want at least 1")
	}
	return nil
}

func (h *hash) encode() string {
	b64 := base64.RawStdEncoding.EncodeToString
	return fmt.Sprintf("%sm=%d,t=%d,p=%d$%s$%s", hashPrefix, h.Memory, h.Time, h.Threads,
		b64(h.salt), b64(h.key))
}

func (h *hash) matches(password []byte) bool {
	got := h.derive(password, h.salt, len(h.key))
	return subtle.ConstantTimeCompare(got, h.key) == 1
}

// decoy is a hash of the same cost that no password matches by chance.
func (h *hash) decoy() *hash {
	key := make([]byte, len(h.key))
	rand.Read(key)
	return &hash{h.Params, make([]byte, len(h.salt)), key}
}

// parseHash decodes a PHC argon2id string. Its errors never quote the
// hash.
func parseHash(s string) (*hash, error) {
	rest, ok := strings.CutPrefix(s, hashPrefix)
	if !ok {
		return nil, errors.New("password hash: want " + hashPrefix + "m=...,t=...,p=...$SALT$KEY (from oblivkv passwd)")
	}
	parts := strings.Split(rest, "$")
	if len(parts) != 3 {
		return nil, errors.New("password hash: want three $-separated fields after the version")
	}
	var h hash
	if _, err := fmt.Sscanf(parts[0], "m=%d,t=%d,p=%d", &h.Memory, &h.Time, &h.Threads); err != nil {
		return nil, errors.New("password hash: bad parameters, want m=KIB,t=PASSES,p=THREADS")
	}
	if err := h.check(); err != nil {
		return nil, fmt.Errorf("password hash: %w", err)
	}
	var err1, err2 error
	h.salt, err1 = base64.RawStdEncoding.DecodeString(parts[1])
	h.key, err2 = base64.RawStdEncoding.DecodeString(parts[2])
	if err1 != nil || err2 != nil || len(h.salt) < 8 || len(h.key) < minKeyLen || len(h.key) > maxKeyLen {
		return nil, errors.New("password hash: bad salt or key (unpadded base64; salt of 8 bytes or more, key of 16 to 64)")
	}
	return &h, nil
}
