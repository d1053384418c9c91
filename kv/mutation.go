package kv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Mutation is what one access does to its key: read it, set it (perhaps
// on a condition), delete it, add to a number it holds or append to it.
// A protocol that implements Updater applies it while the key's block is
// in trusted memory, inside the one access a Get or a Put costs, so that
// a read-modify-write shows storage nothing a Get does not. It is a plain
// value: protocols journal it and send it between their layers.
type Mutation struct {
	Op MutationOp
	// Arg is the operand: the value of a Set, the suffix of an Append,
	// the decimal increment of an IncrBy (an int64) or IncrByFloat.
	Arg []byte
	// If is a Set's condition (IfAlways: none).
	If Condition
	// ReturnOld asks for the value before the mutation in Result.Old
	// (always returned by a Read).
	ReturnOld bool
}

// MutationOp is the kind of a Mutation.
type MutationOp uint8

// Mutation kinds.
const (
	MutRead MutationOp = iota
	MutSet
	MutDelete
	MutIncrBy
	MutIncrByFloat
	MutAppend
)

// Condition limits a Set to a key that exists or to one that does not.
type Condition uint8

// Set conditions.
const (
	IfAlways  Condition = iota
	IfMissing           // Redis's NX
	IfExists            // Redis's XX
)

// Result is the outcome of one Mutation.
type Result struct {
	// Found: the key existed before the mutation.
	Found bool
	// Old is its value before, for a Read or a mutation with ReturnOld
	// (nil otherwise). The caller owns it.
	Old []byte
	// Exists: the key exists after the mutation.
	Exists bool
	// Written: the mutation changed the key (a Set whose condition held,
	// a Delete of a key that existed, an increment, an append).
	Written bool
	// New is the value after an increment (nil for other kinds).
	New []byte
	// Len is the length of the value after the mutation.
	Len int
}

// Errors of a Mutation that does not apply to its key's value. The key
// is left as it was.
var (
	ErrNotInteger = errors.New("value is not an integer or out of range")
	ErrNotFloat   = errors.New("value is not a valid float")
	ErrOverflow   = errors.New("increment or decrement would overflow")
	ErrNotFinite  = errors.New("increment would produce NaN or Infinity")
)

// Rejection names the error of a Mutation that does not apply to its
// key's value, as a number a journal record or a message can carry: 0 is
// none.
type Rejection uint8

// rejections are the errors Rejection numbers, from 1.
var rejections = []error{ErrNotInteger, ErrNotFloat, ErrOverflow, ErrNotFinite, ErrValueTooLarge}

// RejectionOf returns the Rejection err is (0 when err is none).
func RejectionOf(err error) Rejection {
	for i, e := range rejections {
		if errors.Is(err, e) {
			return Rejection(i + 1)
		}
	}
	return 0
}

// Err returns the error r names (nil for 0).
func (r Rejection) Err() error {
	if r == 0 || int(r) > len(rejections) {
		return nil
	}
	return rejections[r-1]
}

// Blind reports whether m's outcome does not depend on the key's value:
// a Set with no condition that does not ask for the old value. A protocol
// may apply a blind mutation before the key's block arrives; its Result's
// Found and Old are then not reported.
func (m Mutation) Blind() bool {
	return m.Op == MutSet && m.If == IfAlways && !m.ReturnOld
}

// LeavesKey reports whether the key exists after m, given only whether it
// existed before (found), for a protocol that must count keys before it
// has their values: a key that existed stays unless m deletes it (a
// mutation that does not apply leaves it), and a missing key is made by
// m if m applies to nothing in a store of valueSize.
func (m Mutation) LeavesKey(found bool, valueSize int) bool {
	if found {
		return m.Op != MutDelete
	}
	_, exists, _, err := m.Apply(nil, false, valueSize)
	return exists && err == nil
}

// Updater is implemented by every store kv.Open returns, and by a
// protocol that applies mutations natively (inside one access).
type Updater interface {
	// Update applies m to key atomically: no other operation on key
	// comes between its read and its write.
	Update(ctx context.Context, key string, m Mutation) (Result, error)
}

// ByUpdate is the Get, Put and Delete of a protocol whose every access is
// an Update: a Get is a MutRead, a Put a MutSet, a Delete a MutDelete. A
// protocol's store embeds it, set to the store itself.
type ByUpdate struct{ Updater }

// Get implements Store.Get as an Update with MutRead.
func (u ByUpdate) Get(ctx context.Context, key string) ([]byte, bool, error) {
	r, err := u.Update(ctx, key, Mutation{Op: MutRead})
	return r.Old, r.Found, err
}

// Put implements Store.Put as an Update with MutSet.
func (u ByUpdate) Put(ctx context.Context, key string, val []byte) error {
	_, err := u.Update(ctx, key, Mutation{Op: MutSet, Arg: val})
	return err
}

// Delete implements Store.Delete as an Update with MutDelete.
func (u ByUpdate) Delete(ctx context.Context, key string) error {
	_, err := u.Update(ctx, key, Mutation{Op: MutDelete})
	return err
}

// Apply computes what m does to a key whose value is old (found: the key
// exists), in a store whose values hold at most valueSize bytes: the
// value the key holds afterwards (next, which may share memory with m.Arg
// or old), whether it exists, and the Result. A mutation that does not
// apply returns an error and leaves (old, found) as they were. Apply is a
// pure function of its arguments, so a protocol replaying its journal
// reaches the same outcome.
func (m Mutation) Apply(old []byte, found bool, valueSize int) (next []byte, exists bool, r Result, err error) {
	r = Result{Found: found}
	if m.ReturnOld || m.Op == MutRead {
		r.Old = bytes.Clone(old)
		if found && r.Old == nil {
			r.Old = []byte{}
		}
	}
	next, exists, r.Written, err = m.next(old, found, valueSize)
	if err != nil {
		return old, found, Result{Found: found}, err
	}
	r.Exists, r.Len = exists, len(next)
	if m.Op == MutIncrBy || m.Op == MutIncrByFloat {
		r.New = bytes.Clone(next)
	}
	return next, exists, r, nil
}

// next returns the key's state after m, and whether m changed it.
func (m Mutation) next(old []byte, found bool, valueSize int) (next []byte, exists, written bool, err error) {
	switch m.Op {
	case MutRead:
		return old, found, false, nil
	case MutSet:
		if m.If == IfMissing && found || m.If == IfExists && !found {
			return old, found, false, nil
		}
		return m.Arg, true, true, fits(m.Arg, valueSize)
	case MutDelete:
		return nil, false, found, nil
	case MutIncrBy:
		next, err = incrBy(old, found, m.Arg)
	case MutIncrByFloat:
		next, err = incrByFloat(old, found, m.Arg)
	case MutAppend:
		next = append(append(make([]byte, 0, len(old)+len(m.Arg)), old...), m.Arg...)
		err = fits(next, valueSize)
	default:
		return old, found, false, fmt.Errorf("kv: unknown mutation %d", m.Op)
	}
	return next, true, true, err
}

func fits(v []byte, valueSize int) error {
	if len(v) > valueSize {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrValueTooLarge, len(v), valueSize)
	}
	return nil
}

// ParseInteger reads a value as Redis reads an integer: the canonical
// decimal form of an int64, nothing before or after it.
func ParseInteger(v []byte) (int64, error) {
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || strconv.FormatInt(n, 10) != string(v) {
		return 0, ErrNotInteger
	}
	return n, nil
}

func incrBy(old []byte, found bool, arg []byte) ([]byte, error) {
	delta, err := ParseInteger(arg)
	if err != nil {
		return nil, err
	}
	var n int64
	if found {
		if n, err = ParseInteger(old); err != nil {
			return nil, err
		}
	}
	if delta > 0 && n > math.MaxInt64-delta || delta < 0 && n < math.MinInt64-delta {
		return nil, ErrOverflow
	}
	return strconv.AppendInt(nil, n+delta, 10), nil
}

// ParseFloat reads a value as Redis reads a float: a finite decimal
// number, nothing before or after it.
func ParseFloat(v []byte) (float64, error) {
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || len(v) == 0 || v[0] == ' ' {
		return 0, ErrNotFloat
	}
	return f, nil
}

func incrByFloat(old []byte, found bool, arg []byte) ([]byte, error) {
	delta, err := ParseFloat(arg)
	if err != nil {
		return nil, err
	}
	var f float64
	if found {
		if f, err = ParseFloat(old); err != nil {
			return nil, err
		}
	}
	sum := f + delta
	if math.IsNaN(sum) || math.IsInf(sum, 0) {
		return nil, ErrNotFinite
	}
	return strconv.AppendFloat(nil, sum, 'f', -1, 64), nil
}

// Pair is one key and its value.
type Pair struct {
	Key   string
	Value []byte
}

// MultiSetter is implemented by every store kv.Open returns.
type MultiSetter interface {
	// SetIfNoneExist sets every pair if none of their keys exists, as one
	// atomic step, and reports whether it did (Redis's MSETNX).
	SetIfNoneExist(ctx context.Context, pairs []Pair) (bool, error)
}

// errNoMutations is the error of Update or SetIfNoneExist on a store that
// kv.Open did not return.
var errNoMutations = errors.New("kv: the store applies no mutations (open it with kv.Open)")

// Update applies m to key in s (see Updater).
func Update(ctx context.Context, s Store, key string, m Mutation) (Result, error) {
	u, ok := s.(Updater)
	if !ok {
		return Result{}, errNoMutations
	}
	return u.Update(ctx, key, m)
}

// SetIfNoneExist sets every pair in s if none of their keys exists (see
// MultiSetter).
func SetIfNoneExist(ctx context.Context, s Store, pairs []Pair) (bool, error) {
	m, ok := s.(MultiSetter)
	if !ok {
		return false, errNoMutations
	}
	return m.SetIfNoneExist(ctx, pairs)
}
