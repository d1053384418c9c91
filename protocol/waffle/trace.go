package waffle

import "container/list"

// batchTrace is what a traced store (TestingKnobs.Trace, set only by this
// package's tests) reports of every batch, once its Write succeeded:
// ground truth the Tap does not show, for the audits of alpha and beta
// and for those that follow one key across its accesses and place a
// Write's real objects. It changes nothing storage sees.
type batchTrace struct {
	TS   uint64
	Read []ref // the B objects read, in the order of the Read
	// Queried is, for each of Read, its place among the batch's real
	// queries in the order the batch planned them (its keys' first
	// requests' arrival); -1 for a fake query.
	Queried []int
	Written []ref // the B objects written, in the order of the Write
	// Evicted is, for each of Written, its place among the batch's cache
	// victims in the order the cache evicted them (least recently used
	// first); -1 for a dummy read and re-encrypted.
	Evicted []int
}

// traceBatch returns the report of batch p to opts.TestingKnobs.Trace, to be made once
// its Write succeeded: victims are its cache victims, and written[j] the
// index of the Write's j-th item among the dummies re-encrypted, then the
// victims (writes).
func (s *store) traceBatch(ts uint64, p *prepared, victims []*list.Element, written []int) func() {
	if s.opts.TestingKnobs.Trace == nil {
		return func() {}
	}
	t := batchTrace{TS: ts}
	var dummies []ref
	for _, i := range p.order {
		t.Read, t.Queried = append(t.Read, p.reads[i].ref), append(t.Queried, -1)
		if p.reads[i].queried() {
			t.Queried[len(t.Queried)-1] = i // chooseReads lists them first, in plan order
		}
	}
	for _, rd := range p.reads {
		if rd.rewritten() {
			dummies = append(dummies, rd.ref)
		}
	}
	for _, k := range written {
		if k < len(dummies) {
			t.Written, t.Evicted = append(t.Written, dummies[k]), append(t.Evicted, -1)
			continue
		}
		t.Written = append(t.Written, victims[k-len(dummies)].Value.(*cached).ref)
		t.Evicted = append(t.Evicted, k-len(dummies))
	}
	return func() { s.opts.TestingKnobs.Trace(t) }
}
