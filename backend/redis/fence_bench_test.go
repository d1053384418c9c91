package redis_test

import (
	"context"
	"testing"

	"github.com/oblivkv/oblivkv/backend/backendtest"
	"github.com/oblivkv/oblivkv/backend/redis"
	"github.com/oblivkv/oblivkv/internal/testsupport/redistest"
)

// BenchmarkFenced measures what fencing costs per write on Redis
// (backendtest.BenchFenced): MSET against the fence's Lua script, on a
// redis-server of the test's own over loopback:
//
//	go test -run '^$' -bench Fenced -benchtime 2s ./backend/redis
func BenchmarkFenced(b *testing.B) {
	bk, err := redis.Open(context.Background(), redistest.Shared(b))
	if err != nil {
		b.Fatal(err)
	}
	defer bk.Close()
	backendtest.BenchFenced(b, bk)
}
