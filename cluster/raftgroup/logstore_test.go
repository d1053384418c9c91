package raftgroup

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/oblivkv/oblivkv/seal"
)

func testLogStore(t *testing.T) *logStore {
	t.Helper()
	master, _ := seal.GenerateMaster()
	keys, _ := seal.NewKeys(master)
	s, err := openLogStore(t.TempDir(), keys)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestLogStore(t *testing.T) {
	s := testLogStore(t)
	var logs []*raft.Log
	for i := uint64(1); i <= 10; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1 + i/5, Type: raft.LogCommand, Data: []byte{byte(i)}, AppendedAt: time.Unix(0, int64(i))})
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if first, _ := s.FirstIndex(); first != 1 {
		t.Fatalf("FirstIndex = %d", first)
	}
	var got raft.Log
	if err := s.GetLog(7, &got); err != nil || got.Term != 2 || !bytes.Equal(got.Data, []byte{7}) || got.AppendedAt.UnixNano() != 7 {
		t.Fatalf("GetLog(7) = %+v, %v", got, err)
	}
	if err := s.DeleteRange(1, 4); err != nil {
		t.Fatal(err)
	}
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first != 5 || last != 10 {
		t.Fatalf("after DeleteRange(1, 4): first %d, last %d; want 5, 10", first, last)
	}
	if err := s.GetLog(3, &got); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog of a deleted entry = %v, want ErrLogNotFound", err)
	}
	// An entry moved to another index does not open.
	sealed, closer, err := s.db.Get(logKey(6))
	if err != nil {
		t.Fatal(err)
	}
	moved := append([]byte(nil), sealed...)
	closer.Close()
	if err := s.db.Set(logKey(8), moved, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.GetLog(8, &got); err == nil {
		t.Fatal("an entry moved to another index opened")
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 9); err != nil {
		t.Fatal(err)
	}
	if v, err := s.GetUint64([]byte("CurrentTerm")); v != 9 || err != nil {
		t.Fatalf("GetUint64 = %d, %v", v, err)
	}
	if v, err := s.Get([]byte("missing")); len(v) != 0 || err != nil {
		t.Fatalf("Get(missing) = %q, %v; want empty", v, err)
	}
}
