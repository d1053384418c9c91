package progress

import (
	"bytes"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestLine(t *testing.T) {
	got := Line("load plain", 50, 100, 2*time.Second)
	want := "load plain [###############...............]  50% 50/100 25/s"
	if got != want {
		t.Errorf("Line = %q\nwant   %q", got, want)
	}
	if got := Line("x", 5000, 1000, time.Second); !strings.Contains(got, "100% 1000/1000 1.0k/s") {
		t.Errorf("overshoot not clamped: %q", got)
	}
}

func TestBarDrawsAndFinishes(t *testing.T) {
	var n atomic.Int64
	// A plain buffer: a bar must write from one goroutine at a time (its
	// ticker's, then Finish's), and the race detector checks that it does.
	var out bytes.Buffer
	b := Start(&out, "run", 10, n.Load)
	n.Store(10)
	b.Finish()
	s := out.String()
	if !strings.HasPrefix(s, "\rrun [") || !strings.HasSuffix(s, "\n") || !strings.Contains(s, "100% 10/10") {
		t.Errorf("bar output %q", s)
	}
	var none *Bar
	none.Finish() // a nil bar is a no-op
	if Start(nil, "x", 1, n.Load) != nil {
		t.Error("nil writer gave a bar")
	}
}
