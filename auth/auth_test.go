package auth

import (
	"strings"
	"testing"
)

// cheap keeps the tests fast; the format and the checks are the same.
var cheap = Params{Memory: 64, Time: 1, Threads: 1}

func mustHash(t *testing.T, password string) string {
	t.Helper()
	h, err := HashWith([]byte(password), cheap)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestHashFormat(t *testing.T) {
	h, err := Hash([]byte("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") || strings.Contains(h, "s3cret") {
		t.Fatalf("hash %q: want the PHC argon2id form with the default parameters", h)
	}
	again, _ := Hash([]byte("s3cret"))
	if again == h {
		t.Fatal("two hashes of one password are equal: the salt is not random")
	}
	parsed, err := parseHash(h)
	if err != nil || parsed.encode() != h {
		t.Fatalf("parse(%q) = %v, %v; want it back", h, parsed, err)
	}
}

func TestAuthenticate(t *testing.T) {
	u := NewUsers()
	if err := u.Add("alice", ReadWrite, mustHash(t, "wonderland")); err != nil {
		t.Fatal(err)
	}
	if err := u.Add("reports", ReadOnly, mustHash(t, "numbers")); err != nil {
		t.Fatal(err)
	}
	if err := u.AddPassword(DefaultUser, ReadWrite, "top"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, password string
		ok             bool
		perm           Permission
	}{
		{"alice", "wonderland", true, ReadWrite},
		{"reports", "numbers", true, ReadOnly},
		{DefaultUser, "top", true, ReadWrite},
		{"alice", "wonderlan", false, 0},
		{"alice", "", false, 0},
		{"reports", "wonderland", false, 0},
		{DefaultUser, "top ", false, 0},
		{DefaultUser, "to", false, 0},
		{"mallory", "wonderland", false, 0},
		{"", "top", false, 0},
	} {
		user, ok := u.Authenticate(c.name, []byte(c.password))
		if ok != c.ok || ok && (user.Name != c.name || user.Perm != c.perm) {
			t.Errorf("Authenticate(%q, %q) = %+v, %v; want ok=%v perm=%v", c.name, c.password, user, ok, c.ok, c.perm)
		}
	}
}

func TestParseUsersFile(t *testing.T) {
	file := "# who may connect\n\n" +
		"alice\tread-write  " + mustHash(t, "a") + "\n" +
		"  bob read-only " + mustHash(t, "b") + "  \n"
	u, err := Parse(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(u.Names(), ","); got != "alice,bob" {
		t.Fatalf("users %s, want alice,bob", got)
	}
	if user, ok := u.Authenticate("bob", []byte("b")); !ok || user.Perm != ReadOnly {
		t.Fatalf("bob: %+v, %v; want read-only", user, ok)
	}
}

func TestParseUsersFileRejects(t *testing.T) {
	good := mustHash(t, "x")
	for _, c := range []struct{ file, want string }{
		{"alice read-write", "line 1: want 3 fields"},
		{"alice admin " + good, "line 1: permission \"admin\""},
		{"# x\nalice read-write $2a$10$bcrypt", "line 2: user \"alice\": password hash: want $argon2id$"},
		{"alice read-write " + good + "\nalice read-only " + good, "line 2: user \"alice\" is defined twice"},
		{"alice read-write $argon2id$v=19$m=99999999,t=1,p=1$c2FsdHNhbHQ$" + strings.Repeat("A", 43), "memory"},
		{"alice read-write $argon2id$v=19$m=64,t=1,p=1$c2FsdHNhbHQ$c2hvcnQ", "bad salt or key"},
		{"al\x01ce read-write " + good, "printable ASCII"},
	} {
		_, err := Parse(strings.NewReader(c.file))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v; want an error containing %q", c.file, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), "c2FsdHNhbHQ") || strings.Contains(err.Error(), good) {
			t.Errorf("error %q quotes the hash", err)
		}
	}
}

func TestAddPasswordRefusesEmpty(t *testing.T) {
	if err := NewUsers().AddPassword(DefaultUser, ReadWrite, ""); err == nil {
		t.Fatal("an empty --requirepass was accepted")
	}
}

// TestUnknownNameCostsAHash checks that an unknown name is checked against
// a hash of the users' cost, not answered at once: the decoy derives a key
// with the same parameters.
func TestUnknownNameCostsAHash(t *testing.T) {
	u := NewUsers()
	if err := u.Add("alice", ReadWrite, mustHash(t, "a")); err != nil {
		t.Fatal(err)
	}
	if u.dummy == nil || u.dummy.Params != cheap || len(u.dummy.key) != keyLen {
		t.Fatalf("decoy %+v: want the parameters and key length of alice's hash", u.dummy)
	}
	if _, ok := u.Authenticate("nobody", nil); ok {
		t.Fatal("an unknown user with an empty password authenticated")
	}
}
