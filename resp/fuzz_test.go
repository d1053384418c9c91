package resp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
)

var fuzzLimits = limits{bulk: 4096, array: 64, inline: 1024, request: 8192}

// FuzzParser parses arbitrary input and checks the parser's invariants: no
// panic, only the documented errors, limits respected, memory in
// proportion to the input, and every parsed request re-encodes to bytes
// that parse to the same request.
func FuzzParser(f *testing.F) {
	for _, seed := range []string{
		"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
		"SET \"a b\" 'c'\r\nGET x\n",
		"*1\r\n$4\r\nPING\r\nPING\r\n*0\r\n",
		"*1\r\n$-5\r\n",
		"*1\r\n$3\r\nab",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := newReader(bufio.NewReaderSize(bytes.NewReader(data), 16), fuzzLimits)
		for n := 0; ; n++ {
			args, err := r.readCommand()
			checkAllocation(t, r, len(data))
			if err != nil {
				checkEndError(t, err)
				return
			}
			if n >= len(data) {
				t.Fatalf("%d requests from %d bytes", n+1, len(data))
			}
			checkRequest(t, args)
		}
	})
}

func checkEndError(t *testing.T, err error) {
	var perr *protocolError
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.As(err, &perr) {
		t.Fatalf("unexpected error type %T: %v", err, err)
	}
}

// checkAllocation bounds the parser's buffers by the input's size, whatever
// lengths the input declared.
func checkAllocation(t *testing.T, r *reader, inputLen int) {
	if limit := 4*inputLen + 2*minGrow; cap(r.arena) > limit {
		t.Fatalf("arena cap %d for %d input bytes", cap(r.arena), inputLen)
	}
	if limit := inputLen + 16; cap(r.ends) > limit || cap(r.args) > limit {
		t.Fatalf("ends cap %d, args cap %d for %d input bytes", cap(r.ends), cap(r.args), inputLen)
	}
}

// checkRequest checks one parsed request against the limits and its
// re-encoding.
func checkRequest(t *testing.T, args [][]byte) {
	if len(args) == 0 || len(args) > fuzzLimits.array {
		t.Fatalf("%d arguments", len(args))
	}
	total := 0
	for _, a := range args {
		if len(a) > fuzzLimits.bulk {
			t.Fatalf("argument of %d bytes", len(a))
		}
		total += len(a)
	}
	if total > fuzzLimits.request {
		t.Fatalf("request of %d bytes", total)
	}
	enc := encodeArray(args)
	r := newReader(bufio.NewReader(bytes.NewReader(enc)), fuzzLimits)
	again, err := r.readCommand()
	if err != nil {
		t.Fatalf("re-encoded %q does not parse: %v", enc, err)
	}
	if !slices.EqualFunc(args, again, bytes.Equal) {
		t.Fatalf("re-encoded request parses to %q, want %q", again, args)
	}
	if _, err := r.readCommand(); !errors.Is(err, io.EOF) {
		t.Fatalf("re-encoded %q: trailing input: %v", enc, err)
	}
}
