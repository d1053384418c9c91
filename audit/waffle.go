package audit

import (
	"fmt"
	"sort"
	"strings"

	"github.com/oblivkv/oblivkv/observe"
)

// WaffleObjectPrefix begins the storage address of every Waffle object
// (protocol/waffle.ObjectPrefix; the storage operator sees it in every
// address). Other addresses, such as the sealed proxy state, are ignored.
const WaffleObjectPrefix = "wf/o/"

// Histogram counts integer samples in bins of width 1: Counts[v] is how
// many samples equal v (samples are never negative).
type Histogram struct {
	Counts []int
}

// Add counts one sample of value v >= 0.
func (h *Histogram) Add(v int) {
	for len(h.Counts) <= v {
		h.Counts = append(h.Counts, 0)
	}
	h.Counts[v]++
}

// Total is the number of samples.
func (h Histogram) Total() int {
	n := 0
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// Rebin folds the histogram into bins of the given width: bin i of the
// result counts the samples in [i*width, (i+1)*width).
func (h Histogram) Rebin(width int) Histogram {
	if width <= 1 {
		return Histogram{Counts: append([]int(nil), h.Counts...)}
	}
	out := Histogram{Counts: make([]int, (len(h.Counts)+width-1)/width)}
	for v, c := range h.Counts {
		out.Counts[v/width] += c
	}
	return out
}

// TotalVariation is the total variation distance between the normalised
// histograms a and b, half the sum over bins of |p_a - p_b|: the share of
// samples whose value would have to change to turn one distribution into
// the other (0 for equal shapes, 1 for disjoint ones). It is 0 when either
// histogram is empty.
func TotalVariation(a, b Histogram) float64 {
	na, nb := a.Total(), b.Total()
	if na == 0 || nb == 0 {
		return 0
	}
	d := 0.0
	for i := range max(len(a.Counts), len(b.Counts)) {
		var pa, pb float64
		if i < len(a.Counts) {
			pa = float64(a.Counts[i]) / float64(na)
		}
		if i < len(b.Counts) {
			pb = float64(b.Counts[i]) / float64(nb)
		}
		if pa > pb {
			d += pa - pb
		} else {
			d += pb - pa
		}
	}
	return d / 2
}

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

// AlphaResult is WaffleAlpha's analysis of a tap log.
type AlphaResult struct {
	// Batches is the number of batches in the log (Reads of objects).
	Batches int
	// Samples has one entry per object id written and later read, in the
	// order of the reads.
	Samples []AlphaSample
	// Max is the largest Alpha of Samples (0 when there are none).
	Max int
	// Hist is the histogram of the Alpha of Samples.
	Hist Histogram
	// Unread are the ids written, never read and still on storage at the
	// end of the log, with their age so far, oldest first.
	Unread []AlphaSample
	// MaxUnreadAge is the largest Alpha of Unread (0 when none).
	MaxUnreadAge int
	// DeletedUnread counts ids deleted without having been read (a bulk
	// load replaces the initial layout this way); they are not samples.
	DeletedUnread int
}

// WaffleAlpha measures, from a tap log alone (what the storage operator
// sees), the alpha of Definition 1 in seed 001, Sec. 5.1: the number of
// server accesses between the write of a storage id and its read. Waffle
// accesses storage in batches (one Read, one Write, one Delete each), so,
// as Sec. 5.1 says for batched proxies, accesses are counted in batches.
//
// Batches are numbered by their Reads: every Read call of at least one
// object address (WaffleObjectPrefix) starts the next batch, numbered from
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
func WaffleAlpha(records []observe.Record) (AlphaResult, error) {
	var res AlphaResult
	written := map[string]int{} // id -> batch, while on storage and unread
	read := map[string]bool{}   // ids already read
	batch := 0
	for _, rec := range records {
		var addrs []string
		for _, a := range rec.Addrs {
			if strings.HasPrefix(a, WaffleObjectPrefix) {
				addrs = append(addrs, a)
			}
		}
		if len(addrs) == 0 || rec.Op == observe.OpScan {
			continue
		}
		if rec.Err {
			return res, fmt.Errorf("audit: call %d (%v of %d objects) failed; alpha is undefined", rec.Seq, rec.Op, len(addrs))
		}
		switch rec.Op {
		case observe.OpRead:
			batch++
			for _, a := range addrs {
				w, ok := written[a]
				switch {
				case read[a]:
					return res, fmt.Errorf("audit: call %d reads %s a second time", rec.Seq, a)
				case !ok:
					return res, fmt.Errorf("audit: call %d reads %s, never written in the log", rec.Seq, a)
				}
				delete(written, a)
				read[a] = true
				s := AlphaSample{Addr: a, Written: w, Read: batch, Alpha: batch - w}
				res.Samples = append(res.Samples, s)
				res.Max = max(res.Max, s.Alpha)
				res.Hist.Add(s.Alpha)
			}
		case observe.OpWrite:
			for _, a := range addrs {
				if _, ok := written[a]; ok || read[a] {
					return res, fmt.Errorf("audit: call %d writes %s a second time", rec.Seq, a)
				}
				written[a] = batch
			}
		case observe.OpDelete:
			for _, a := range addrs {
				if _, ok := written[a]; ok {
					delete(written, a)
					res.DeletedUnread++
				}
			}
		}
	}
	res.Batches = batch
	for a, w := range written {
		res.Unread = append(res.Unread, AlphaSample{Addr: a, Written: w, Read: -1, Alpha: batch - w})
		res.MaxUnreadAge = max(res.MaxUnreadAge, batch-w)
	}
	sort.Slice(res.Unread, func(i, j int) bool {
		if res.Unread[i].Alpha != res.Unread[j].Alpha {
			return res.Unread[i].Alpha > res.Unread[j].Alpha
		}
		return res.Unread[i].Addr < res.Unread[j].Addr
	})
	return res, nil
}

// WaffleEvent is one batch in the proxy's own record of a Waffle run
// (which the storage operator does not see): the logical objects it read
// from storage and those it wrote to storage, as opaque names (a key, or a
// dummy's id). Within a batch the reads come before the writes.
type WaffleEvent struct {
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

// BetaResult is WaffleBeta's analysis of a proxy record.
type BetaResult struct {
	// Samples has one entry per read followed by a write of the same
	// object, in the order of the writes.
	Samples []BetaSample
	// Min is the smallest Beta of Samples, or -1 when there are none.
	Min int
	// Hist is the histogram of the Beta of Samples.
	Hist Histogram
	// Pending counts objects read and not written again by the end (held
	// in the cache); beta is a lower bound, so they violate nothing.
	Pending int
	// Reread counts reads of an object already read and not written since:
	// Definition 1 allows no access of k between a read and the next write.
	Reread int
}

// WaffleBeta measures the beta of Definition 1 in seed 001, Sec. 5.1 from
// the proxy's record of which logical objects each batch read and wrote
// (events[i] is batch i): for every read of an object in batch r followed
// by its next write in batch w, beta = w - r. Theorem 7.2 bounds it below
// by floor(C/(B-f_D+R) - 1) for real objects; its proof leaves dummies out
// ("they can be arbitrarily changed by the proxy", and Waffle rewrites the
// dummies it reads in the same batch, beta 0), so pass real objects only
// to check the theorem. Writes of objects not read before (bulk-loaded
// objects evicted from the cache) are not samples.
func WaffleBeta(events []WaffleEvent) BetaResult {
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
