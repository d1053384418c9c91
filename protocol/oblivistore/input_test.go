package oblivistore

import (
	"errors"
	"reflect"
	"testing"

	"github.com/oblivkv/oblivkv/kv"
)

// TestRequestRecords: a request's journal record gives back the whole
// mutation.
func TestRequestRecords(t *testing.T) {
	for _, r := range []Request{
		{Op: kv.MutSet, Key: "k", Val: []byte("v"), If: kv.IfMissing, ReturnOld: true},
		{Op: kv.MutIncrBy, Key: "n", Val: []byte("-3")},
		{Op: kv.MutRead, Key: "k"},
		{Op: kv.MutSet, Key: "e", Val: []byte{}},
	} {
		in, err := decodeInput(appendInput(nil, Input{Request: &r}))
		if err != nil || in.Request == nil || !reflect.DeepEqual(*in.Request, r) {
			t.Errorf("request %+v came back as %+v, %v", r, in.Request, err)
		}
	}
}

// TestInputRecords: every other input's journal record gives it back,
// its group and incarnation included.
func TestInputRecords(t *testing.T) {
	for _, in := range []Input{
		{Read: &ReadDone{Group: 3, ID: 7, Blocks: []Block{{Real: true, Val: []byte("v")}, {}}}},
		{Write: &WriteDone{Group: 2, ID: 9}},
		{Reseed: &Reseed{Seed: [32]byte{1, 2}, Incarnation: 5}},
	} {
		got, err := decodeInput(appendInput(nil, in))
		if err != nil || !reflect.DeepEqual(got, in) {
			t.Errorf("input %+v came back as %+v, %v", in, got, err)
		}
	}
}

// TestEarlierBuildRefused: the state of an earlier build (one core with
// the Front and a Server of every partition) is refused with
// ErrEarlierBuild, which says what to do, not misread.
func TestEarlierBuildRefused(t *testing.T) {
	type server struct{ Geo geometry }
	type front struct{ NextSeq uint64 }
	earlier, err := encodeState(&struct {
		Front  front
		Server server
		Pub    []byte
	}{front{7}, server{geometry{Partitions: 4, Top: 3}}, []byte{1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(earlier); !errors.Is(err, ErrEarlierBuild) || !errors.Is(err, kv.ErrMismatch) {
		t.Errorf("restoring an earlier build's state: %v, want ErrEarlierBuild", err)
	}
	now, err := NewCore(16, Options{}.EnsureDefaults(16), [32]byte{}).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(now); err != nil {
		t.Errorf("restoring this build's state: %v", err)
	}
}
