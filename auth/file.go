package auth

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
)

// The users file holds one user per line, three fields separated by spaces
// or tabs:
//
//	# name   permission   argon2id hash (from oblivkv passwd)
//	alice    read-write   $argon2id$v=19$m=19456,t=2,p=1$SALT$KEY
//	reports  read-only    $argon2id$v=19$m=19456,t=2,p=1$SALT$KEY
//
// Blank lines and lines starting with '#' are ignored. A name appears once.

// LoadFile reads a users file.
func LoadFile(path string) (*Users, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("users file: %w", err)
	}
	defer f.Close()
	u, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("users file %s: %w", path, err)
	}
	return u, nil
}

// Parse reads users in the users file format. Its errors name the line,
// never quote a hash.
func Parse(r io.Reader) (*Users, error) {
	u := NewUsers()
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		if err := u.addLine(sc.Text()); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
	}
	return u, sc.Err()
}

func (u *Users) addLine(line string) error {
	line = strings.TrimSpace(line)
	if line == "" || strings.HasPrefix(line, "#") {
		return nil
	}
	fields := strings.Fields(line)
	if len(fields) != 3 {
		return fmt.Errorf("want 3 fields (name, read-write or read-only, hash), got %d", len(fields))
	}
	perm, err := ParsePermission(fields[1])
	if err != nil {
		return err
	}
	return u.Add(fields[0], perm, fields[2])
}
