package treebeard

// requestTable is a Stash shard's record of the client requests it
// applied, by RequestID, so that a request is applied at most once however
// many batches carry it (a Router retrying it after a failover): a copy of
// a request being applied waits for the first one's reply, and a copy of
// one applied gets the stored reply. A request's reply stays until its
// Router releases the batch that brought it (AccessMsg.Release: the
// Router has the reply). Requests with the zero RequestID (a test's
// scripted ones) are never matched.
type requestTable struct {
	replies map[RequestID]Reply    // requests applied and not released
	copies  map[RequestID][]waiter // requests being applied: the copies awaiting their reply
	batches map[uint64][]RequestID // by epoch: the requests each batch brought, until released
}

func newRequestTable() requestTable {
	return requestTable{replies: map[RequestID]Reply{}, copies: map[RequestID][]waiter{}, batches: map[uint64][]RequestID{}}
}

// admit notes that epoch's batch brought request id.
func (t *requestTable) admit(epoch uint64, id RequestID) {
	if id != (RequestID{}) {
		t.batches[epoch] = append(t.batches[epoch], id)
	}
}

// copyOf reports whether request id was seen already, and if it was,
// returns its stored reply for to, or holds to until the first copy is
// answered. A request not seen before is noted as being applied.
func (t *requestTable) copyOf(id RequestID, to waiter) ([]completion, bool) {
	if id == (RequestID{}) {
		return nil, false
	}
	if rep, ok := t.replies[id]; ok {
		return []completion{{To: to, Reply: rep}}, true
	}
	if waiting, ok := t.copies[id]; ok {
		t.copies[id] = append(waiting, to)
		return nil, true
	}
	t.copies[id] = nil
	return nil, false
}

// answer appends the completion of request id, whose reply to is rep, and
// those of its copies, to done, and stores the reply.
func (t *requestTable) answer(id RequestID, to waiter, rep Reply, done []completion) []completion {
	done = append(done, completion{To: to, Reply: rep})
	if id == (RequestID{}) {
		return done
	}
	for _, c := range t.copies[id] {
		done = append(done, completion{To: c, Reply: rep})
	}
	delete(t.copies, id)
	t.replies[id] = rep
	return done
}

// release forgets the replies of the requests epoch's batch brought: the
// Router has them.
func (t *requestTable) release(epoch uint64) {
	for _, id := range t.batches[epoch] {
		if _, applying := t.copies[id]; !applying {
			delete(t.replies, id)
		}
	}
	delete(t.batches, epoch)
}
