package seal

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func testKeys(t *testing.T, fill byte) *Keys {
	t.Helper()
	k, err := NewKeys(bytes.Repeat([]byte{fill}, MasterKeySize))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestRoundTrip(t *testing.T) {
	k := testKeys(t, 1)
	ad := []byte("addr/1")
	for _, n := range []int{0, 1, 15, 16, 17, 1000, 1 << 16} {
		plain := bytes.Repeat([]byte{byte(n), 0xA5}, n/2+1)[:n]
		sealed := k.Seal(nil, ad, plain)
		if len(sealed) != n+k.Overhead() {
			t.Errorf("sealed %d bytes into %d; want %d (overhead %d)", n, len(sealed), n+k.Overhead(), k.Overhead())
		}
		if n >= 16 && bytes.Contains(sealed, plain) {
			t.Errorf("sealed block of %d bytes contains the plaintext", n)
		}
		got, err := k.Open(nil, ad, sealed)
		if err != nil || !bytes.Equal(got, plain) {
			t.Errorf("Open(Seal(%d bytes)) = %d bytes, %v; want the plaintext", n, len(got), err)
		}
	}
}

// Seal and Open append to dst and leave its prefix alone.
func TestAppendsToDst(t *testing.T) {
	k := testKeys(t, 1)
	sealed := k.Seal([]byte("head:"), []byte("a"), []byte("body"))
	if !bytes.HasPrefix(sealed, []byte("head:")) {
		t.Fatalf("Seal dropped dst's prefix: %q", sealed[:5])
	}
	got, err := k.Open([]byte("x:"), []byte("a"), sealed[len("head:"):])
	if err != nil || string(got) != "x:body" {
		t.Fatalf("Open with dst = %q, %v; want \"x:body\"", got, err)
	}
}

// Seal into a dst with room allocates nothing: the bucket codec seals
// every slot of a bucket into one buffer.
func TestSealAllocates(t *testing.T) {
	k := testKeys(t, 1)
	ad, plain := []byte("addr/1"), make([]byte, 1000)
	dst := make([]byte, 0, len(plain)+k.Overhead())
	var sealed []byte
	if n := testing.AllocsPerRun(100, func() { sealed = k.Seal(dst, ad, plain) }); n != 0 {
		t.Errorf("Seal into a large enough dst allocates %.1f times; want 0", n)
	}
	if got, err := k.Open(nil, ad, sealed); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("the sealed block does not open: %v", err)
	}
}

// Two seals of the same plaintext differ (fresh nonces) and both open.
func TestFreshNonces(t *testing.T) {
	k := testKeys(t, 1)
	a := k.Seal(nil, []byte("ad"), []byte("same"))
	b := k.Seal(nil, []byte("ad"), []byte("same"))
	if bytes.Equal(a, b) {
		t.Fatal("two seals of the same plaintext are identical")
	}
	if bytes.Equal(a[:nonceSize], b[:nonceSize]) {
		t.Fatal("two seals share a nonce")
	}
}

// wantTampered requires Open to fail with ErrTampered and yield nothing.
func wantTampered(t *testing.T, what string, k *Keys, ad, sealed []byte) {
	t.Helper()
	got, err := k.Open(nil, ad, sealed)
	if !errors.Is(err, ErrTampered) {
		t.Errorf("%s: Open error = %v; want ErrTampered", what, err)
	}
	if got != nil {
		t.Errorf("%s: Open returned %d bytes of data alongside the error", what, len(got))
	}
}

// Every single-bit flip, in the nonce, the ciphertext or the tag, is
// detected; so is every truncation and an appended byte.
func TestTampering(t *testing.T) {
	k := testKeys(t, 1)
	ad := []byte("addr/7")
	plain := []byte("thirty-two bytes of plaintext!!!")
	sealed := k.Seal(nil, ad, plain)
	regions := map[string]int{}
	for bit := range 8 * len(sealed) {
		c := bytes.Clone(sealed)
		c[bit/8] ^= 1 << (bit % 8)
		region := "ciphertext"
		switch i := bit / 8; {
		case i < nonceSize:
			region = "nonce"
		case i >= len(sealed)-k.aead.Overhead():
			region = "tag"
		}
		regions[region]++
		wantTampered(t, "bit "+region, k, ad, c)
	}
	if regions["nonce"] == 0 || regions["ciphertext"] == 0 || regions["tag"] == 0 {
		t.Fatalf("flips did not cover every region: %v", regions)
	}
	for n := range len(sealed) {
		wantTampered(t, "truncated", k, ad, sealed[:n])
	}
	wantTampered(t, "extended", k, ad, append(bytes.Clone(sealed), 0))
	// The untouched block still opens: the failures above are the flips.
	if got, err := k.Open(nil, ad, sealed); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("the original block no longer opens: %v", err)
	}
}

// A block copied to another address (another associated data) is refused.
func TestMovedBlock(t *testing.T) {
	k := testKeys(t, 1)
	sealed := k.Seal(nil, []byte("addr/1"), []byte("value"))
	for _, ad := range []string{"addr/2", "addr/1\x00", "addr/", "", "ADDR/1"} {
		wantTampered(t, "moved to "+ad, k, []byte(ad), sealed)
	}
}

func TestWrongKey(t *testing.T) {
	a, b := testKeys(t, 1), testKeys(t, 2)
	sealed := a.Seal(nil, []byte("ad"), []byte("value"))
	wantTampered(t, "other key", b, []byte("ad"), sealed)
	// The same master derives the same keys.
	if got, err := testKeys(t, 1).Open(nil, []byte("ad"), sealed); err != nil || string(got) != "value" {
		t.Fatalf("a second Keys from the same master: %q, %v", got, err)
	}
}

func TestNewKeysSize(t *testing.T) {
	for _, n := range []int{0, 16, MasterKeySize - 1, MasterKeySize + 1} {
		if _, err := NewKeys(make([]byte, n)); err == nil {
			t.Errorf("NewKeys accepted a %d-byte master key", n)
		}
	}
}

func TestGenerateMaster(t *testing.T) {
	a, err := GenerateMaster()
	if err != nil {
		t.Fatal(err)
	}
	b, err := GenerateMaster()
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != MasterKeySize || bytes.Equal(a, b) {
		t.Fatalf("GenerateMaster: %d bytes, equal twice: %v", len(a), bytes.Equal(a, b))
	}
}

func TestPRF(t *testing.T) {
	k := testKeys(t, 1)
	p := func(parts ...string) [PRFSize]byte {
		bs := make([][]byte, len(parts))
		for i, s := range parts {
			bs[i] = []byte(s)
		}
		return k.PRF(bs...)
	}
	if p("key", "7") != p("key", "7") || p("key") != testKeys(t, 1).PRF([]byte("key")) {
		t.Error("PRF is not deterministic")
	}
	if p("key") == testKeys(t, 2).PRF([]byte("key")) {
		t.Error("PRF does not depend on the key")
	}
	distinct := [][]string{
		{"ab", "c"}, {"a", "bc"}, {"abc"}, {"a", "b", "c"}, {}, {""}, {"", ""},
		{"key"}, {"kez"}, {"\x01a"}, {"\x01", "a"},
	}
	seen := map[[PRFSize]byte][]string{}
	for _, parts := range distinct {
		out := p(parts...)
		if prev, dup := seen[out]; dup {
			t.Errorf("PRF%q == PRF%q", parts, prev)
		}
		seen[out] = parts
	}
}

// The PRF's pooled hashes are safe and correct under concurrency.
func TestPRFConcurrent(t *testing.T) {
	k := testKeys(t, 1)
	want := make([][PRFSize]byte, 64)
	for i := range want {
		want[i] = k.PRF([]byte{byte(i)})
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for r := range 200 {
				i := (g*7 + r) % len(want)
				if k.PRF([]byte{byte(i)}) != want[i] {
					t.Errorf("concurrent PRF(%d) differs", i)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	master := bytes.Repeat([]byte{0xC3}, MasterKeySize)
	if err := WriteKeyFile(path, master); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o600 {
		t.Errorf("key file mode %v; want 0600", perm)
	}
	got, err := ReadKeyFile(path)
	if err != nil || !bytes.Equal(got, master) {
		t.Fatalf("ReadKeyFile = %x, %v; want the written key", got, err)
	}

	// Never overwrites.
	err = WriteKeyFile(path, bytes.Repeat([]byte{0x11}, MasterKeySize))
	if err == nil {
		t.Error("WriteKeyFile overwrote an existing key file")
	}
	if got, _ := ReadKeyFile(path); !bytes.Equal(got, master) {
		t.Error("the refused WriteKeyFile changed the key file")
	}

	// Refused when the group or others can read (or write) it.
	for _, mode := range []os.FileMode{0o640, 0o604, 0o660, 0o644, 0o602} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, err := ReadKeyFile(path)
		if err == nil {
			t.Errorf("ReadKeyFile accepted a key file of mode %v", mode)
		} else if strings.Contains(err.Error(), hex.EncodeToString(master)) {
			t.Errorf("ReadKeyFile's error reveals the key: %v", err)
		}
	}
	if err := os.Chmod(path, 0o400); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadKeyFile(path); err != nil {
		t.Errorf("ReadKeyFile refused a 0400 key file: %v", err)
	}

	if _, err := ReadKeyFile(filepath.Join(dir, "missing")); !errors.Is(err, ErrNoKeyFile) {
		t.Errorf("ReadKeyFile of a missing file: %v; want ErrNoKeyFile", err)
	}
}

func TestKeyFileGarbage(t *testing.T) {
	dir := t.TempDir()
	for i, content := range []string{"", "not a key\n", keyFileHeader + "abcd\n",
		keyFileHeader + strings.Repeat("zz", MasterKeySize) + "\n"} {
		path := filepath.Join(dir, "key"+string(rune('a'+i)))
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadKeyFile(path); err == nil {
			t.Errorf("ReadKeyFile accepted %q", content)
		}
	}
}

func TestParseKey(t *testing.T) {
	good := strings.Repeat("ab", MasterKeySize)
	for _, s := range []string{good, strings.ToUpper(good), " " + good + "\n"} {
		k, err := ParseKey(s, "test")
		if err != nil || len(k) != MasterKeySize || k[0] != 0xab {
			t.Errorf("ParseKey(%q) = %x, %v", s, k, err)
		}
	}
	for _, s := range []string{"", "ab", good[:len(good)-2], good + "ab", good[:len(good)-1] + "g", "0x" + good[2:]} {
		_, err := ParseKey(s, "the env var")
		if err == nil {
			t.Errorf("ParseKey(%q) accepted a bad key", s)
			continue
		}
		if !strings.Contains(err.Error(), "the env var") {
			t.Errorf("ParseKey error %q does not name the source", err)
		}
		if len(s) >= 8 && strings.Contains(err.Error(), strings.TrimSpace(s)) {
			t.Errorf("ParseKey error %q reveals the input", err)
		}
	}
}

// TestReseal: an item sealed under the old keys comes back under the new
// ones only; one already under the new keys is sealed afresh; one that
// opens under neither, or under another ad, is ErrTampered.
func TestReseal(t *testing.T) {
	from, to, other := testKeys(t, 1), testKeys(t, 2), testKeys(t, 3)
	ad, plain := []byte("addr/1"), []byte("value")
	once, err := Reseal(from, to, nil, ad, from.Seal(nil, ad, plain))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := from.Open(nil, ad, once); !errors.Is(err, ErrTampered) {
		t.Fatalf("a re-sealed item opens under the old keys: %v", err)
	}
	twice, err := Reseal(from, to, nil, ad, once)
	if err != nil || bytes.Equal(twice, once) {
		t.Fatalf("re-sealing a re-sealed item: %v (same bytes: %v)", err, bytes.Equal(twice, once))
	}
	for _, got := range [][]byte{once, twice} {
		if p, err := to.Open(nil, ad, got); err != nil || !bytes.Equal(p, plain) {
			t.Fatalf("under the new keys: %q, %v", p, err)
		}
	}
	if _, err := Reseal(from, to, nil, ad, other.Seal(nil, ad, plain)); !errors.Is(err, ErrTampered) {
		t.Fatalf("an item of a third key: %v", err)
	}
	if _, err := Reseal(from, to, nil, []byte("addr/2"), from.Seal(nil, ad, plain)); !errors.Is(err, ErrTampered) {
		t.Fatalf("an item moved to another address: %v", err)
	}
}

// TestWithPRFKey: keys given another's PRF key compute its PRF, and seal
// and compute CurrentPRF as before.
func TestWithPRFKey(t *testing.T) {
	first, second := testKeys(t, 1), testKeys(t, 2)
	kept, err := second.WithPRFKey(first.PRFKey())
	if err != nil {
		t.Fatal(err)
	}
	if kept.PRF([]byte("k")) != first.PRF([]byte("k")) || kept.PRF([]byte("k")) == second.PRF([]byte("k")) {
		t.Fatal("WithPRFKey did not keep the PRF")
	}
	if kept.CurrentPRF([]byte("k")) != second.PRF([]byte("k")) || second.CurrentPRF([]byte("k")) != second.PRF([]byte("k")) {
		t.Fatal("CurrentPRF is not the master key's own PRF")
	}
	if _, err := kept.Open(nil, []byte("a"), second.Seal(nil, []byte("a"), []byte("v"))); err != nil {
		t.Fatalf("WithPRFKey changed the sealing key: %v", err)
	}
	if _, err := second.WithPRFKey([]byte("short")); err == nil {
		t.Fatal("a 5-byte PRF key was accepted")
	}
}
