package tree

import (
	"testing"
)

func TestLayout(t *testing.T) {
	l := Layout{Prefix: "po/"}
	seen := map[string]uint64{}
	for _, b := range []uint64{0, 1, 2, 255, 256, 1 << 40, ^uint64(0)} {
		a := l.Addr(b)
		if len(a) != len(l.Prefix)+8 {
			t.Errorf("Addr(%d) = %q: %d bytes; want prefix + 8", b, a, len(a))
		}
		if prev, dup := seen[a]; dup {
			t.Errorf("Addr(%d) = Addr(%d) = %q", b, prev, a)
		}
		seen[a] = b
		if got, ok := l.Bucket(a); !ok || got != b {
			t.Errorf("Bucket(Addr(%d)) = %d, %v", b, got, ok)
		}
	}
	for _, bad := range []string{"", "po/", "px/12345678", "po/1234567", "po/123456789"} {
		if _, ok := l.Bucket(bad); ok {
			t.Errorf("Bucket(%q) accepted an address outside the layout", bad)
		}
	}
	addrs := l.Addrs([]uint64{3, 4}, []string{"junk", "junk", "junk"})
	if len(addrs) != 2 || addrs[0] != l.Addr(3) || addrs[1] != l.Addr(4) {
		t.Errorf("Addrs = %q; want the addresses of 3 and 4", addrs)
	}
	if (Layout{Prefix: "a/"}).Addr(1) == (Layout{Prefix: "b/"}).Addr(1) {
		t.Error("two layouts with distinct prefixes share an address")
	}
}
