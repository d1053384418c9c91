package resp

import (
	"bufio"
	"io"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/kv"
)

// BenchmarkPipelined measures the server's per-request cost: batches of
// 100 pipelined GETs (or SETs) over one connection, to a plain store.
func BenchmarkPipelined(b *testing.B) {
	for _, cmd := range []string{"GET", "SET"} {
		b.Run(cmd, func(b *testing.B) {
			env := startServer(b, openStore(b, kv.Config{}), Options{})
			benchPipeline(b, env, cmd)
		})
	}
}

func benchPipeline(b *testing.B, env *testEnv, cmd string) {
	const batch = 100
	req := strings.Repeat("*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$3\r\nval\r\n", batch)
	reply := len("+OK\r\n") * batch
	if cmd == "GET" {
		req = strings.Repeat("*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n", batch)
		reply = len("$-1\r\n") * batch
	}
	nc := env.dial(b)
	br := bufio.NewReader(nc)
	buf := make([]byte, reply)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		if _, err := io.WriteString(nc, req); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(br, buf); err != nil {
			b.Fatal(err)
		}
	}
}
