package waffle

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/observe"
)

// AlphaSample is one storage id's life in a Waffle tap log: the batch that
// wrote it and, once read, the batch that read it.
type AlphaSample struct {
	Addr    string
	Written int // batch index of the write (0: before the first batch)
	Read    int // batch index of the read, or -1 if never read
	// Alpha is Read - Written for an id read; for one never read, its age
	// so far: the number of batches in the log - Written.
	Alpha int
}

// AlphaResult is Alpha's analysis of a tap log.
type AlphaResult struct {
	// Batches is the number of batches in the log (Reads of objects).
	Batches int
	// Samples has one entry per object id written and later read, in the
	// order of the reads.
	Samples []AlphaSample
	// Max is the largest Alpha of Samples (0 when there are none).
	Max int
	// Hist is the histogram of the Alpha of Samples.
	Hist audit.Histogram
	// Unread are the ids written, never read and still on storage at the
	// end of the log, with their age so far, oldest first.
	Unread []AlphaSample
	// MaxUnreadAge is the largest Alpha of Unread (0 when none).
	MaxUnreadAge int
	// DeletedUnread counts ids deleted without having been read (a bulk
	// load replaces the initial layout this way); they are not samples.
	DeletedUnread int
}

// Alpha measures, from a tap log alone (what the storage operator
// sees), the alpha of Definition 1 of Waffle Sec. 5.1: the number of
// server accesses between the write of a storage id and its read. Waffle
// accesses storage in batches (one Read, one Write, one Delete each), so,
// as Sec. 5.1 says for batched proxies, accesses are counted in batches.
//
// Batches are numbered by their Reads: every Read call of at least one
// object address (ObjectPrefix) starts the next batch, numbered from
// 1; a Write belongs to the batch of the last Read before it, so ids
// written before the first Read (initialisation, bulk load) are in batch
// 0. An id written in batch w and read in batch r has alpha = r - w; since
// a batch reads before it writes, alpha >= 1 for every id. Theorem 7.1
// bounds it by ceil(max((N-1)/(B-R-f_D), D/f_D)) for a full store.
//
// The log must hold every write of the ids it reads (start it before the
// store is created or loaded): a read of an id never written, an id read
// or written twice (Waffle never reuses an id) or a failed object call is
// an error, as alpha is then undefined.
func Alpha(records []observe.Record) (AlphaResult, error) {
	l := alphaLog{written: map[string]int{}, read: map[string]bool{}}
	for _, rec := range records {
		addrs := objectAddrs(rec.Addrs)
		if len(addrs) == 0 || rec.Op == observe.OpScan {
			continue
		}
		if rec.Err {
			return l.res, fmt.Errorf("audit: call %d (%v of %d objects) failed; alpha is undefined", rec.Seq, rec.Op, len(addrs))
		}
		if err := l.add(rec.Seq, rec.Op, addrs); err != nil {
			return l.res, err
		}
	}
	return l.result(), nil
}

// objectAddrs returns the Waffle object addresses among addrs.
func objectAddrs(addrs []string) []string {
	var out []string
	for _, a := range addrs {
		if strings.HasPrefix(a, ObjectPrefix) {
			out = append(out, a)
		}
	}
	return out
}

// alphaLog is Alpha's state while it walks a log.
type alphaLog struct {
	res     AlphaResult
	batch   int
	written map[string]int  // id -> batch, while on storage and unread
	read    map[string]bool // ids already read
}

// add applies the object call seq, of op on addrs.
func (l *alphaLog) add(seq uint64, op observe.Op, addrs []string) error {
	switch op {
	case observe.OpRead:
		l.batch++
		for _, a := range addrs {
			if err := l.readID(seq, a); err != nil {
				return err
			}
		}
	case observe.OpWrite:
		for _, a := range addrs {
			if _, ok := l.written[a]; ok || l.read[a] {
				return fmt.Errorf("audit: call %d writes %s a second time", seq, a)
			}
			l.written[a] = l.batch
		}
	case observe.OpDelete:
		for _, a := range addrs {
			if _, ok := l.written[a]; ok {
				delete(l.written, a)
				l.res.DeletedUnread++
			}
		}
	}
	return nil
}

// readID records the read of id a in the current batch as a sample.
func (l *alphaLog) readID(seq uint64, a string) error {
	w, ok := l.written[a]
	switch {
	case l.read[a]:
		return fmt.Errorf("audit: call %d reads %s a second time", seq, a)
	case !ok:
		return fmt.Errorf("audit: call %d reads %s, never written in the log", seq, a)
	}
	delete(l.written, a)
	l.read[a] = true
	s := AlphaSample{Addr: a, Written: w, Read: l.batch, Alpha: l.batch - w}
	l.res.Samples = append(l.res.Samples, s)
	l.res.Max = max(l.res.Max, s.Alpha)
	l.res.Hist.Add(s.Alpha)
	return nil
}

// result completes the analysis with the ids still unread at the end.
func (l *alphaLog) result() AlphaResult {
	res := l.res
	res.Batches = l.batch
	for a, w := range l.written {
		res.Unread = append(res.Unread, AlphaSample{Addr: a, Written: w, Read: -1, Alpha: l.batch - w})
		res.MaxUnreadAge = max(res.MaxUnreadAge, l.batch-w)
	}
	slices.SortFunc(res.Unread, func(a, b AlphaSample) int {
		return cmp.Or(cmp.Compare(b.Alpha, a.Alpha), strings.Compare(a.Addr, b.Addr))
	})
	return res
}

// Event is one batch in the proxy's own record of a Waffle run
// (which the storage operator does not see): the logical objects it read
// from storage and those it wrote to storage, as opaque names (a key, or a
// dummy's id). Within a batch the reads come before the writes.
type Event struct {
	Read    []string
	Written []string
}

// BetaSample is one read of an object followed by its next write.
type BetaSample struct {
	Object  string
	Read    int // batch index (position in the event list) of the read
	Written int // batch index of the next write of the object
	Beta    int // Written - Read
}

// BetaResult is Beta's analysis of a proxy record.
type BetaResult struct {
	// Samples has one entry per read followed by a write of the same
	// object, in the order of the writes.
	Samples []BetaSample
	// Min is the smallest Beta of Samples, or -1 when there are none.
	Min int
	// Hist is the histogram of the Beta of Samples.
	Hist audit.Histogram
	// Pending counts objects read and not written again by the end (held
	// in the cache); beta is a lower bound, so they violate nothing.
	Pending int
	// Reread counts reads of an object already read and not written since:
	// Definition 1 allows no access of k between a read and the next write.
	Reread int
}

// Beta measures the beta of Definition 1 of Waffle Sec. 5.1 from
// the proxy's record of which logical objects each batch read and wrote
// (events[i] is batch i): for every read of an object in batch r followed
// by its next write in batch w, beta = w - r. Theorem 7.2 bounds it below
// by floor(C/(B-f_D+R) - 1) for real objects; its proof leaves dummies out
// ("they can be arbitrarily changed by the proxy", and Waffle rewrites the
// dummies it reads in the same batch, beta 0), so pass real objects only
// to check the theorem. Writes of objects not read before (bulk-loaded
// objects evicted from the cache) are not samples.
func Beta(events []Event) BetaResult {
	res := BetaResult{Min: -1}
	open := map[string]int{} // object -> batch of its last read, until written
	for i, ev := range events {
		for _, o := range ev.Read {
			if _, ok := open[o]; ok {
				res.Reread++
			}
			open[o] = i
		}
		for _, o := range ev.Written {
			r, ok := open[o]
			if !ok {
				continue
			}
			delete(open, o)
			s := BetaSample{Object: o, Read: r, Written: i, Beta: i - r}
			res.Samples = append(res.Samples, s)
			if res.Min < 0 || s.Beta < res.Min {
				res.Min = s.Beta
			}
			res.Hist.Add(s.Beta)
		}
	}
	res.Pending = len(open)
	return res
}

// FreshIDs checks, from a tap log that starts before the store was
// created or loaded, Waffle's rule that "each object stored at the server
// is written and then read at most once before its storage id changes"
// (Waffle Sec. 5): an exact check whose violations are ids written a
// second time (before or after their read), ids read a second time, ids
// read but never written in the log, and failed object calls. Alpha
// stops at the first of these; this check counts them all.
func FreshIDs(name string, records []observe.Record) audit.Check {
	written, read := map[string]bool{}, map[string]bool{}
	var violations []string
	calls := 0
	for _, rec := range records {
		addrs := objectAddrs(rec.Addrs)
		if len(addrs) == 0 || rec.Op == observe.OpScan || rec.Op == observe.OpDelete {
			continue
		}
		calls++
		if rec.Err {
			violations = append(violations, fmt.Sprintf("call %d (%v) failed", rec.Seq, rec.Op))
			continue
		}
		for _, a := range addrs {
			if v := freshIDViolation(rec.Op, written[a], read[a]); v != "" {
				violations = append(violations, fmt.Sprintf("call %d %s %s", rec.Seq, v, shortID(a)))
			}
			if rec.Op == observe.OpWrite {
				written[a] = true
			} else {
				read[a] = true
			}
		}
	}
	c := audit.Exact(name, violations)
	if len(violations) == 0 {
		c.Detail = fmt.Sprintf("%d ids written, %d read, in %d calls", len(written), len(read), calls)
	}
	return c
}

// freshIDViolation says what breaks FreshIDs' rule when op (a Read or
// a Write) touches an id already written and or read, or "" when nothing.
func freshIDViolation(op observe.Op, written, read bool) string {
	switch {
	case op == observe.OpWrite && written:
		return "writes a second time"
	case op == observe.OpRead && read:
		return "reads a second time"
	case op == observe.OpRead && !written:
		return "reads, never written in the log,"
	}
	return ""
}

// AlphaBound checks Theorem 7.1's bound (Waffle Sec. 7) on a
// Alpha analysis: no id is read more than bound batches after the
// batch that wrote it, and none still unread at the end of the log is
// bound batches old or older (its read, in a later batch, would exceed the
// bound). An exact check: Waffle's fake queries pick the least recently
// accessed objects, so the bound holds for every id, whatever the
// workload, in a full store.
func AlphaBound(name string, a AlphaResult, bound int) audit.Check {
	var violations []string
	for _, s := range a.Samples {
		if s.Alpha > bound {
			violations = append(violations, fmt.Sprintf("%s written in batch %d, read in batch %d", shortID(s.Addr), s.Written, s.Read))
		}
	}
	for _, s := range a.Unread {
		if s.Alpha >= bound {
			violations = append(violations, fmt.Sprintf("%s written in batch %d, unread after batch %d", shortID(s.Addr), s.Written, a.Batches))
		}
	}
	c := audit.Exact(name, violations)
	summary := fmt.Sprintf("bound %d; %d ids read, max alpha %d; %d unread, max age %d", bound, len(a.Samples), a.Max, len(a.Unread), a.MaxUnreadAge)
	c.Detail = strings.TrimSuffix(summary+"; "+c.Detail, "; ")
	return c
}

// shortID is an object address as a log shows it: the first 8 bytes of
// its id, in hex.
func shortID(addr string) string {
	id := strings.TrimPrefix(addr, ObjectPrefix)
	return fmt.Sprintf("%x", id[:min(len(id), 8)])
}

// idPrefixBytes is how much of two ids IDPrefixes compares.
const idPrefixBytes = 4

// IDPrefixes checks that Waffle's storage ids look like fresh PRF
// outputs (Waffle Sec. 5: an object's id is PRF(key, timestamp)): the
// pairs of distinct ids written in records that share their first
// idPrefixBytes bytes, against the C(n, 2)/2^32 pairs random ids give
// (audit.Excess). An id that keeps part of the key's PRF from one access to the
// next, with only the rest fresh, gives every key's ids one prefix.
func IDPrefixes(name string, records []observe.Record) audit.Check {
	ids := map[string]bool{}
	for _, rec := range records {
		if rec.Op != observe.OpWrite {
			continue
		}
		for _, a := range objectAddrs(rec.Addrs) {
			ids[strings.TrimPrefix(a, ObjectPrefix)] = true
		}
	}
	byPrefix := map[string]int{}
	for id := range ids {
		byPrefix[id[:min(len(id), idPrefixBytes)]]++
	}
	pairs := 0
	for _, n := range byPrefix {
		pairs += n * (n - 1) / 2
	}
	n := float64(len(ids))
	return audit.Excess(name, pairs, n*(n-1)/2/math.Exp2(8*idPrefixBytes),
		fmt.Sprintf("%d pairs of the %d ids written share their first %d bytes", pairs, len(ids), idPrefixBytes))
}

// IsObjectCall selects the Reads, Writes and Deletes of objects.
func IsObjectCall(r observe.Record) bool {
	return r.Op != observe.OpScan && len(r.Addrs) > 0 && strings.HasPrefix(r.Addrs[0], ObjectPrefix)
}
