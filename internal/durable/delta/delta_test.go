package delta

import (
	"encoding/binary"
	"errors"
	"testing"
)

// What the helpers append, a Decoder reads back; any cut of it fails with
// ErrMalformed and reads zero values from there on, and bytes left over
// fail Done.
func TestRoundTrip(t *testing.T) {
	id := []byte("0123456789abcdef")
	b := binary.AppendUvarint(nil, 300)
	b = AppendBytes(b, []byte("value"))
	b = AppendBool(b, true)
	b = append(b, 7)
	b = append(b, id...)
	b = binary.AppendUvarint(b, 2)
	b = AppendBytes(AppendBytes(b, nil), []byte("x"))

	read := func(b []byte) (*Decoder, []any) {
		d := NewDecoder(b)
		got := []any{d.Uvarint(), string(d.Bytes(5)), d.Bool(), d.Byte()}
		var dst [16]byte
		d.Read(dst[:])
		got = append(got, string(dst[:]))
		for n := d.Count(); n > 0; n-- {
			got = append(got, string(d.Bytes(1)))
		}
		return d, got
	}
	d, got := read(b)
	want := []any{uint64(300), "value", true, byte(7), string(id), "", "x"}
	if err := d.Done(); err != nil || len(got) != len(want) {
		t.Fatalf("read %v, %v; want %v", got, err, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("item %d: %v; want %v", i, got[i], want[i])
		}
	}
	for cut := range len(b) {
		if d, _ := read(b[:cut]); !errors.Is(d.Done(), ErrMalformed) {
			t.Fatalf("cut at %d of %d bytes decoded: %v", cut, len(b), d.Done())
		}
	}
	if d, _ := read(append(b, 0)); !errors.Is(d.Done(), ErrMalformed) {
		t.Fatal("a trailing byte passed Done")
	}
	d = NewDecoder(append(b, "tail"...))
	d.Uvarint()
	if rest := d.Rest(); len(rest) != len(b)-2+4 || string(rest[len(rest)-4:]) != "tail" || d.Done() != nil {
		t.Fatalf("Rest after a number: %q, %v", rest, d.Done())
	}
}

// Lengths are never trusted: a string longer than its limit, or than what
// is left, and a count of more items than bytes left, fail without
// allocating what they claim.
func TestLengthsChecked(t *testing.T) {
	for name, b := range map[string][]byte{
		"string over its limit": AppendBytes(nil, []byte("toolong")),
		"string past the end":   binary.AppendUvarint(nil, 1<<40),
		"count past the end":    binary.AppendUvarint(nil, 1<<40),
		"flag neither 0 nor 1":  {2},
	} {
		d := NewDecoder(b)
		switch name {
		case "count past the end":
			if n := d.Count(); n != 0 {
				t.Errorf("%s: count %d", name, n)
			}
		case "flag neither 0 nor 1":
			d.Bool()
		default:
			if v := d.Bytes(5); v != nil {
				t.Errorf("%s: read %q", name, v)
			}
		}
		if !errors.Is(d.Err(), ErrMalformed) {
			t.Errorf("%s: %v; want ErrMalformed", name, d.Err())
		}
	}
}

// Check records the caller's own failure, and only the first failure is
// kept.
func TestCheck(t *testing.T) {
	d := NewDecoder([]byte{1})
	d.Check(true, "fine")
	if d.Failed() {
		t.Fatal("a passing Check failed the Decoder")
	}
	d.Check(false, "a leaf outside the tree")
	d.Check(false, "later")
	if err := d.Err(); err == nil || err.Error() != "malformed journal delta: a leaf outside the tree" {
		t.Fatalf("Err = %v", err)
	}
	if v := d.Byte(); v != 0 {
		t.Fatalf("a read after a failure returned %d", v)
	}
}
