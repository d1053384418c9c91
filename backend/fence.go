package backend

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
)

// Fence is what makes a write of one machine refusable once a newer
// driver of the same machine has written: storage keeps at Key the
// highest Token it accepted there, and refuses a fenced write whose Token
// is lower. The zero Fence means unfenced: the write is a plain Write.
type Fence struct {
	// Key is the storage address of the machine's token, e.g.
	// "fence/treebeard/3". Only fenced writes may write it.
	Key string
	// Token only grows for one Key: a later driver writes with a higher
	// one (see durable.FenceToken).
	Token uint64
}

// FenceKeyPrefix begins every protocol's fence keys: storage's fencing
// tokens are no protocol's data, and a store never reads them as such (a
// test that tampers with what a store reads leaves them alone).
const FenceKeyPrefix = "fence/"

// Unfenced reports whether f is the zero Fence.
func (f Fence) Unfenced() bool { return f == Fence{} }

// ErrFenced is the error of a fenced write storage refused because it
// holds a higher token for the write's Key: a newer driver of the machine
// has written, and the refused one must stop leading. Nothing of the
// refused batch was stored.
var ErrFenced = errors.New("backend: fenced out")

// TokenSize is the number of bytes of a token as storage keeps it at a
// Fence's Key: big-endian, so byte order is numeric order.
const TokenSize = 8

// EncodeToken returns the stored form of a token.
func EncodeToken(token uint64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, TokenSize), token)
}

// StoredToken returns the token a Fence's Key holds; a missing value holds
// token 0, which every fenced write passes. Anything else is not a token
// this package wrote, and an error.
func StoredToken(stored []byte) (uint64, error) {
	switch len(stored) {
	case 0:
		return 0, nil
	case TokenSize:
		return binary.BigEndian.Uint64(stored), nil
	}
	return 0, fmt.Errorf("backend: fence token of %d bytes, want %d", len(stored), TokenSize)
}

// Admit returns nil if a write with f may go ahead over stored, what
// storage holds at f.Key (its token at most f.Token), and otherwise the
// refusal (Refused), or the error of a value that is no token.
func Admit(f Fence, stored []byte) error {
	token, err := StoredToken(stored)
	if err != nil {
		return err
	}
	if f.Token < token {
		return Refused(f, token)
	}
	return nil
}

// Refused returns the error of a write with f refused because storage
// holds stored at f.Key.
func Refused(f Fence, stored uint64) error {
	return fmt.Errorf("%w: token %d at %q is below the stored %d", ErrFenced, f.Token, f.Key, stored)
}

// CheckFence rejects a Fence with no Key but a Token, and a batch that
// writes its Key as an item: the token's address belongs to the fence.
func CheckFence(f Fence, items []Item) error {
	if f.Unfenced() {
		return nil
	}
	if f.Key == "" {
		return fmt.Errorf("backend: fence with token %d has no key", f.Token)
	}
	for _, it := range items {
		if it.Addr == f.Key {
			return fmt.Errorf("backend: a fenced batch writes its fence key %q as an item", f.Key)
		}
	}
	return nil
}

// FencedItems returns the whole batch storage stores for a fenced write
// it accepts: items, then the token at f.Key.
func FencedItems(f Fence, items []Item) []Item {
	out := make([]Item, len(items), len(items)+1)
	copy(out, items)
	return append(out, Item{Addr: f.Key, Value: EncodeToken(f.Token)})
}

// PipelineFenced is Pipeline with a fenced write: in one round trip where
// b is a Pipeliner, else as a WriteFenced and Reads one after the other.
// A refused write (ErrFenced) stored nothing and returns no values; after
// any other error the write may or may not have been applied. The fence
// is checked and written even when there are no items.
func PipelineFenced(ctx context.Context, b Backend, f Fence, items []Item, reads [][]string) ([][][]byte, error) {
	if p, ok := b.(Pipeliner); ok {
		return p.PipelineFenced(ctx, f, items, reads)
	}
	if err := b.WriteFenced(ctx, f, items); err != nil {
		return nil, err
	}
	return readEach(ctx, b, reads)
}

// WithFence returns b with every Write and every Pipeline that writes
// fenced by fence(), read at each call: the storage a machine's driver
// hands the code that writes for it, so that none of the machine's writes
// goes out unfenced, however many places issue them. A Pipeline without
// items only reads, and claims no fence. Versioned and explicitly fenced
// writes pass through as they are.
//
// The handles of one driver share d: once storage refuses a fenced write
// of any of them, every later call of each fails with that refusal
// without reaching storage (Deposition).
func WithFence(b Backend, fence func() Fence, d *Deposition) Backend {
	return &fenced{Backend: b, fence: fence, d: d}
}

// Deposition records that a driver has been deposed: storage refused one
// of its fenced writes (ErrFenced), so a newer driver of the same machine
// has written since. What storage holds is then the newer driver's, and
// reading it would look like tampering: the deposed driver's handles
// (WithFence) make no call any more. The zero value is a driver in
// office.
type Deposition struct{ err atomic.Pointer[error] }

// Err returns the refusal that deposed the driver, or nil.
func (d *Deposition) Err() error {
	if p := d.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Superseded asks storage whether a newer driver has taken over from this
// one: it reads the keys of fences (one Read) and, if one holds a higher
// token than its fence's, records that as the driver's deposition and
// returns it (ErrFenced); otherwise nil. To an older driver a newer one's
// writes look like tampering, so a driver that finds data that fails
// authentication asks this before it reports tampering. b must read
// storage directly, not through a handle d has already closed.
func (d *Deposition) Superseded(ctx context.Context, b Backend, fences ...Fence) error {
	if err := d.Err(); err != nil {
		return err
	}
	addrs := make([]string, len(fences))
	for i, f := range fences {
		addrs[i] = f.Key
	}
	vals, err := b.Read(ctx, addrs)
	if err != nil {
		return nil // cannot tell: the caller's own error stands
	}
	for i, f := range fences {
		if stored, err := StoredToken(vals[i]); err == nil && stored > f.Token {
			return d.note(Refused(f, stored))
		}
	}
	return nil
}

// note records err if it is a refusal, and returns it.
func (d *Deposition) note(err error) error {
	if errors.Is(err, ErrFenced) {
		d.err.CompareAndSwap(nil, &err)
	}
	return err
}

type fenced struct {
	Backend
	fence func() Fence
	d     *Deposition
}

func (f *fenced) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	if err := f.d.Err(); err != nil {
		return nil, err
	}
	return f.Backend.Read(ctx, addrs)
}

func (f *fenced) Write(ctx context.Context, items []Item) error {
	return f.WriteFenced(ctx, f.fence(), items)
}

func (f *fenced) WriteFenced(ctx context.Context, fence Fence, items []Item) error {
	if err := f.d.Err(); err != nil {
		return err
	}
	return f.d.note(f.Backend.WriteFenced(ctx, fence, items))
}

func (f *fenced) Pipeline(ctx context.Context, items []Item, reads [][]string) ([][][]byte, error) {
	if len(items) == 0 {
		if err := f.d.Err(); err != nil {
			return nil, err
		}
		return Pipeline(ctx, f.Backend, nil, reads)
	}
	return f.PipelineFenced(ctx, f.fence(), items, reads)
}

func (f *fenced) PipelineFenced(ctx context.Context, fence Fence, items []Item, reads [][]string) ([][][]byte, error) {
	if err := f.d.Err(); err != nil {
		return nil, err
	}
	out, err := PipelineFenced(ctx, f.Backend, fence, items, reads)
	return out, f.d.note(err)
}

func (f *fenced) Sync(ctx context.Context) error { return Sync(ctx, f.Backend) }

func (f *fenced) DeferSync() bool { return DeferSync(f.Backend) }
