package redis

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/internal/testsupport/redistest"
)

// commandLog is a go-redis hook that records the name of every command
// sent, a pipeline as "pipeline(its commands' names)".
type commandLog struct {
	mu    sync.Mutex
	names []string
}

func (l *commandLog) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (l *commandLog) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if cmd.Name() != "hello" { // a new pooled connection's handshake, not a call's
			l.mu.Lock()
			l.names = append(l.names, cmd.Name())
			l.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (l *commandLog) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		l.mu.Lock()
		names := make([]string, len(cmds))
		for i, c := range cmds {
			names[i] = c.Name()
		}
		if !slices.Equal(names, []string{"select"}) { // a new pooled connection's setup, not a call's
			l.names = append(l.names, "pipeline("+strings.Join(names, " ")+")")
		}
		l.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (l *commandLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	names := l.names
	l.names = nil
	return names
}

// TestOneCommandPerCall checks the adversary-visible shape: each call is
// exactly one command (a Pipeline one pipelined round trip), and empty
// batches send nothing.
func TestOneCommandPerCall(t *testing.T) {
	ctx := context.Background()
	b, err := Open(ctx, redistest.Shared(t))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	versioned := []backend.VersionedItem{{Addr: "v", Version: 1, Value: []byte("1")}, {Addr: "w", Version: 1}}
	// The first versioned write may also send the script (EVAL after a
	// failed EVALSHA); every later one is one EVALSHA.
	if _, err := b.WriteVersioned(ctx, versioned); err != nil {
		t.Fatal(err)
	}
	// The token's first write is the script (EVAL if the server lacks it).
	fence := backend.Fence{Key: "fence", Token: 1}
	if err := b.WriteFenced(ctx, fence, nil); err != nil {
		t.Fatal(err)
	}
	log := &commandLog{}
	b.client.AddHook(log)
	b.watch.client.AddHook(log)
	// The first batch of a token arms a watched connection.
	items := []backend.Item{{Addr: "a", Value: []byte("1")}, {Addr: "b", Value: []byte("2")}}
	if err := b.WriteFenced(ctx, fence, items); err != nil {
		t.Fatal(err)
	}
	if got, want := log.take(), []string{"pipeline(unwatch multi exec watch get)", "pipeline(multi mset exec watch get)"}; !slices.Equal(got, want) {
		t.Fatalf("the first fenced writes sent %q, want %q", got, want)
	}
	steps := []struct {
		want string
		call func() error
	}{
		{"", func() error { _, err := b.Read(ctx, nil); return err }},
		{"", func() error { return b.Write(ctx, nil) }},
		{"", func() error { return b.Delete(ctx, nil) }},
		{"", func() error { _, err := b.WriteVersioned(ctx, nil); return err }},
		{"evalsha", func() error { _, err := b.WriteVersioned(ctx, versioned); return err }},
		{"mset", func() error { return b.Write(ctx, items) }},
		{"mget", func() error { _, err := b.Read(ctx, []string{"a", "b", "c"}); return err }},
		{"del", func() error { return b.Delete(ctx, []string{"a", "b", "c"}) }},
		{"pipeline(mset mget mget)", func() error { _, err := b.Pipeline(ctx, items, [][]string{{"a"}, {"b", "c"}}); return err }},
		{"pipeline(multi mset exec watch get)", func() error { return b.WriteFenced(ctx, fence, items) }},
		{"evalsha", func() error { return b.WriteFenced(ctx, fence, nil) }}, // the token alone
		// The script wrote the fence key, so the watched connection's EXEC
		// does not run; the pipeline re-armed it and the batch goes again.
		{"pipeline(multi mset exec mget mget watch get) pipeline(multi mset exec mget mget watch get)", func() error {
			_, err := b.PipelineFenced(ctx, fence, items, [][]string{{"a"}, {"b", "c"}})
			return err
		}},
		{"pipeline(multi mset exec mget mget watch get)", func() error {
			_, err := b.PipelineFenced(ctx, fence, items, [][]string{{"a"}, {"b", "c"}})
			return err
		}},
	}
	for _, s := range steps {
		if err := s.call(); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(log.take(), " "); got != s.want {
			t.Fatalf("call sent %q, want exactly %q", got, s.want)
		}
	}
}

// TestPipelineFencedLoadsScript: a server that lost its scripts (a
// restart, SCRIPT FLUSH) answers the fenced pipeline's EVALSHA with
// NOSCRIPT and runs nothing of the write; the pipeline is sent once more
// with EVAL, and works.
func TestPipelineFencedLoadsScript(t *testing.T) {
	ctx := context.Background()
	b, err := Open(ctx, redistest.Shared(t))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	log := &commandLog{}
	b.client.AddHook(log)
	fence := backend.Fence{Key: "fence", Token: 3}
	vals, err := b.PipelineFenced(ctx, fence, []backend.Item{{Addr: "a", Value: []byte("1")}}, [][]string{{"a"}})
	if err != nil || len(vals) != 1 || string(vals[0][0]) != "1" {
		t.Fatalf("PipelineFenced without the script loaded = %q, %v", vals, err)
	}
	if got := log.take(); !slices.Equal(got, []string{"pipeline(evalsha mget)", "pipeline(eval mget)"}) {
		t.Fatalf("sent %q, want the pipeline with EVALSHA and then with EVAL", got)
	}
	if _, err := b.PipelineFenced(ctx, fence, nil, [][]string{{"a"}}); err != nil {
		t.Fatal(err)
	}
	if got := log.take(); !slices.Equal(got, []string{"pipeline(evalsha mget)"}) {
		t.Fatalf("sent %q once the script is loaded, want one pipeline with EVALSHA", got)
	}
}

func TestGlobEscape(t *testing.T) {
	for in, want := range map[string]string{
		"":       "",
		"plain":  "plain",
		"a*[":    `a\*\[`,
		`x?]\^-`: `x\?\]\\\^\-`,
	} {
		if got := globEscape(in); got != want {
			t.Errorf("globEscape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPoolSize(t *testing.T) {
	url := redistest.Shared(t)
	for _, c := range []struct {
		url  string
		opts Options
		want int
	}{
		{url, Options{}, DefaultPoolSize},
		{url, Options{PoolSize: 7}, 7},
		{url + "?pool_size=9", Options{}, 9},
		{url + "?pool_size=9", Options{PoolSize: 7}, 7},
	} {
		b, err := OpenWith(context.Background(), c.url, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		if got := b.client.Options().PoolSize; got != c.want {
			t.Errorf("OpenWith(%s, %+v): pool size %d, want %d", c.url, c.opts, got, c.want)
		}
		b.Close()
	}
}

// TestDeposedWatchedConnection: a driver whose connection is armed at its
// token (it has written fenced batches) writes again after a newer driver,
// on another client, raised the token. Its EXEC must not run: the late
// batch is refused whole, and storage keeps the newer driver's values.
func TestDeposedWatchedConnection(t *testing.T) {
	ctx := context.Background()
	url := redistest.Shared(t)
	older, newer := openTwice(t, url)
	fence := backend.Fence{Key: "fence/t", Token: 5}
	for i := range 3 { // the script, then batches on the armed connection
		if err := older.WriteFenced(ctx, fence, []backend.Item{{Addr: "a", Value: []byte{byte(i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := older.watch.idle[fence.Key]; len(got) != 1 || got[0].token != 5 {
		t.Fatalf("older driver's armed connections = %v, want one armed at token 5", got)
	}
	if err := newer.WriteFenced(ctx, backend.Fence{Key: fence.Key, Token: 6}, []backend.Item{{Addr: "a", Value: []byte("six")}}); err != nil {
		t.Fatal(err)
	}
	late := []backend.Item{{Addr: "a", Value: []byte("late")}, {Addr: "b", Value: []byte("late")}}
	if err := older.WriteFenced(ctx, fence, late); !errors.Is(err, backend.ErrFenced) {
		t.Fatalf("late WriteFenced = %v, want backend.ErrFenced", err)
	}
	if _, err := older.PipelineFenced(ctx, fence, late, [][]string{{"a"}}); !errors.Is(err, backend.ErrFenced) {
		t.Fatalf("late PipelineFenced = %v, want backend.ErrFenced", err)
	}
	vals, err := newer.Read(ctx, []string{"a", "b"})
	if err != nil || string(vals[0]) != "six" || vals[1] != nil {
		t.Fatalf("storage holds %q, %v; want the newer driver's a = six and no b", vals, err)
	}
}

// TestFencedWithoutTransactions: a server that refuses MULTI (here by ACL)
// gets every fenced batch by the script, never an MSET outside a
// transaction.
func TestFencedWithoutTransactions(t *testing.T) {
	ctx := context.Background()
	url := redistest.Shared(t)
	admin, err := Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.client.Do(ctx, "acl", "setuser", "nomulti", "on", ">pw", "~*", "&*", "+@all", "-multi").Err(); err != nil {
		t.Fatal(err)
	}
	defer admin.client.Do(ctx, "acl", "deluser", "nomulti")
	b, err := Open(ctx, strings.Replace(url, "redis://", "redis://nomulti:pw@", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	log := &commandLog{}
	b.client.AddHook(log)
	b.watch.client.AddHook(log)
	fence := backend.Fence{Key: "fence/t", Token: 1}
	for i := range 3 {
		if err := b.WriteFenced(ctx, fence, []backend.Item{{Addr: "a", Value: []byte{byte(i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range log.take() {
		if strings.Contains(name, "mset") {
			t.Fatalf("sent %q to a server that refuses MULTI, want only the script", name)
		}
	}
	if !b.watch.off.Load() {
		t.Fatal("the watched path is still on after the server refused MULTI")
	}
}

// openTwice opens two clients of url, as two drivers of one store would.
func openTwice(t *testing.T, url string) (*Backend, *Backend) {
	t.Helper()
	var bs [2]*Backend
	for i := range bs {
		b, err := Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		bs[i] = b
	}
	return bs[0], bs[1]
}

// TestWatchedConnBackAfterClose: a fenced write in flight when the
// backend closes hands its connection back to a closed pool, which closes
// it.
func TestWatchedConnBackAfterClose(t *testing.T) {
	ctx := context.Background()
	b, err := Open(ctx, redistest.Shared(t))
	if err != nil {
		t.Fatal(err)
	}
	w, err := b.watch.take(ctx, "fence/t")
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	b.watch.put("fence/t", w) // must not panic
	if err := w.conn.Ping(ctx).Err(); err == nil {
		t.Fatal("a connection handed back after Close is still open")
	}
}
