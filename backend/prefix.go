package backend

import (
	"context"
	"strings"
)

// WithPrefix returns a Backend that stores every address of b under prefix,
// so several stores (one per benchmark run, say) can share one storage
// without seeing each other. Scan results have the prefix removed again.
func WithPrefix(b Backend, prefix string) Backend {
	if prefix == "" {
		return b
	}
	return &prefixed{next: b, prefix: prefix}
}

type prefixed struct {
	next   Backend
	prefix string
}

func (p *prefixed) addrs(in []string) []string {
	out := make([]string, len(in))
	for i, a := range in {
		out[i] = p.prefix + a
	}
	return out
}

func (p *prefixed) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	return p.next.Read(ctx, p.addrs(addrs))
}

func (p *prefixed) Write(ctx context.Context, items []Item) error {
	return p.next.Write(ctx, p.items(items))
}

func (p *prefixed) items(in []Item) []Item {
	out := make([]Item, len(in))
	for i, it := range in {
		out[i] = Item{Addr: p.prefix + it.Addr, Value: it.Value}
	}
	return out
}

func (p *prefixed) Pipeline(ctx context.Context, items []Item, reads [][]string) ([][][]byte, error) {
	return Pipeline(ctx, p.next, p.items(items), p.lists(reads))
}

func (p *prefixed) lists(reads [][]string) [][]string {
	out := make([][]string, len(reads))
	for i, addrs := range reads {
		out[i] = p.addrs(addrs)
	}
	return out
}

// fence returns f with its key under the prefix; a fence without a key
// (the zero Fence, or a malformed one) is left for the backend to judge.
func (p *prefixed) fence(f Fence) Fence {
	if f.Key == "" {
		return f
	}
	return Fence{Key: p.prefix + f.Key, Token: f.Token}
}

func (p *prefixed) WriteFenced(ctx context.Context, f Fence, items []Item) error {
	return p.next.WriteFenced(ctx, p.fence(f), p.items(items))
}

func (p *prefixed) PipelineFenced(ctx context.Context, f Fence, items []Item, reads [][]string) ([][][]byte, error) {
	return PipelineFenced(ctx, p.next, p.fence(f), p.items(items), p.lists(reads))
}

func (p *prefixed) WriteVersioned(ctx context.Context, items []VersionedItem) (int, error) {
	out := make([]VersionedItem, len(items))
	for i, it := range items {
		out[i] = VersionedItem{Addr: p.prefix + it.Addr, Version: it.Version, Value: it.Value}
	}
	return p.next.WriteVersioned(ctx, out)
}

func (p *prefixed) Delete(ctx context.Context, addrs []string) error {
	return p.next.Delete(ctx, p.addrs(addrs))
}

func (p *prefixed) Sync(ctx context.Context) error { return Sync(ctx, p.next) }

func (p *prefixed) DeferSync() bool { return DeferSync(p.next) }

func (p *prefixed) Scan(ctx context.Context, prefix string, fn func(string) error) error {
	return p.next.Scan(ctx, p.prefix+prefix, func(a string) error {
		return fn(strings.TrimPrefix(a, p.prefix))
	})
}

func (p *prefixed) Close() error { return p.next.Close() }

// Drop deletes every address under b's prefix, in batches, without closing
// it. b must come from WithPrefix.
func Drop(ctx context.Context, b Backend) error {
	p, ok := b.(*prefixed)
	if !ok {
		return nil
	}
	var batch []string
	err := p.next.Scan(ctx, p.prefix, func(a string) error {
		batch = append(batch, a)
		if len(batch) < 1000 {
			return nil
		}
		err := p.next.Delete(ctx, batch)
		batch = batch[:0]
		return err
	})
	if err == nil && len(batch) > 0 {
		err = p.next.Delete(ctx, batch)
	}
	return err
}
