package oblivistore

import (
	"reflect"
	"testing"

	"github.com/oblivkv/oblivkv/internal/durable/delta"
	"github.com/oblivkv/oblivkv/kv"
)

// TestRequestRecords: a request's journal record gives back the whole
// mutation, and a record written before mutations (kind, op, key, value)
// still reads as the Get, Put or Delete it was.
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
	old := append([]byte{recRequest, byte(kv.MutSet)}, delta.AppendBytes(nil, []byte("k"))...)
	old = delta.AppendBool(old, true)
	old = delta.AppendBytes(old, []byte("v"))
	in, err := decodeInput(old)
	want := Request{Op: kv.MutSet, Key: "k", Val: []byte("v")}
	if err != nil || in.Request == nil || !reflect.DeepEqual(*in.Request, want) {
		t.Errorf("a record from before mutations came back as %+v, %v; want %+v", in.Request, err, want)
	}
}
