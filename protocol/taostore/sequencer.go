package taostore

// sequencer releases replies in the order requests arrived (Sec. IV-B step
// 4): a reply leaves only after every earlier request's reply has left, so
// a delayed path read holds back every later reply, whether or not the
// requests repeat a key. Without it, an adversary who delays one real read
// learns from early replies which requests were fake reads (the CURIOUS
// attack, Sec. II-B). It is guarded by the store's lock.
type sequencer struct {
	queue    []*request           // arrival order; queue[0] is the oldest unreleased
	arrived  uint64               // requests added so far
	durable  uint64               // the journal is durable up to this record
	released func(arrival uint64) // tests only: each reply as it leaves
	leak     leak                 // tests only: leakUnorderedReplies
}

// add enqueues a request as it arrives.
func (q *sequencer) add(r *request) {
	r.arrival = q.arrived
	q.arrived++
	q.queue = append(q.queue, r)
}

// release lets out every complete request at the head of the queue, in
// order, and stops at the first incomplete one: a request is complete
// once its path returned, its answer is known and the journal record of
// that answer is durable.
func (q *sequencer) release() {
	if q.leak == leakUnorderedReplies {
		q.releaseComplete()
		return
	}
	n := 0
	for n < len(q.queue) && q.queue[n].complete(q.durable) {
		if q.released != nil {
			q.released(q.queue[n].arrival)
		}
		close(q.queue[n].done)
		n++
	}
	if n > 0 {
		q.queue = append(q.queue[:0], q.queue[n:]...)
	}
}
