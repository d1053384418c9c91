package backend_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/observe"
)

// TestReadAllReadsEachAddressOnceInOrder shows ReadAll hands over every
// address under the prefix once with its value, and that storage sees one
// Scan and then Reads of the addresses in ascending order, batch by
// batch, whatever order they were written in.
func TestReadAllReadsEachAddressOnceInOrder(t *testing.T) {
	ctx := context.Background()
	raw := mem.New()
	var want []string
	for _, i := range rand.New(rand.NewPCG(1, 2)).Perm(7) {
		a := fmt.Sprintf("s/%02d", i)
		want = append(want, a)
		if err := raw.Write(ctx, []backend.Item{{Addr: a, Value: []byte(a + "!")}, {Addr: "other/" + a, Value: []byte{1}}}); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(want)
	log := &observe.MemoryLog{}
	var got []string
	err := backend.ReadAll(ctx, observe.NewTap(raw, log), "s/", 3, func(items []backend.Item) error {
		for _, it := range items {
			if !bytes.Equal(it.Value, []byte(it.Addr+"!")) {
				t.Errorf("%s holds %q", it.Addr, it.Value)
			}
			got = append(got, it.Addr)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("handed %v, want %v", got, want)
	}
	var calls []string
	for _, r := range log.Records() {
		calls = append(calls, r.Op.String()+" "+strings.Join(r.Addrs, ","))
	}
	wantCalls := []string{"scan s/", "read s/00,s/01,s/02", "read s/03,s/04,s/05", "read s/06"}
	if !slices.Equal(calls, wantCalls) {
		t.Fatalf("storage saw %q, want %q", calls, wantCalls)
	}
}

// vanishing is storage that loses one address between a Scan and a Read.
type vanishing struct {
	backend.Backend
	addr string
}

func (v vanishing) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	vals, err := v.Backend.Read(ctx, addrs)
	for i, a := range addrs {
		if a == v.addr {
			vals[i] = nil
		}
	}
	return vals, err
}

// TestReadAllRefusesAVanishedAddress shows an address listed but missing
// when read is an error, never a copy that silently lacks it.
func TestReadAllRefusesAVanishedAddress(t *testing.T) {
	ctx := context.Background()
	raw := mem.New()
	if err := raw.Write(ctx, []backend.Item{{Addr: "a", Value: []byte{1}}, {Addr: "b", Value: []byte{2}}}); err != nil {
		t.Fatal(err)
	}
	err := backend.ReadAll(ctx, vanishing{raw, "b"}, "", 0, func([]backend.Item) error { return nil })
	if err == nil || !strings.Contains(err.Error(), `"b" vanished`) {
		t.Fatalf("ReadAll over a vanished address: %v", err)
	}
}
