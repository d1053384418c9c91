package slots

// Metrics are a slots backend's figures for INFO and /metrics.
type Metrics struct {
	Bytes     int64  // bytes the slot files occupy on disk now
	SlotsUsed int64  // slots holding a value or a tombstone now, or replaced and waiting for a sync point
	SlotsFree int64  // slots inside the files free for reuse now
	Syncs     uint64 // sync points since the store was opened
}

// Metrics returns the backend's figures now.
func (b *Backend) Metrics() Metrics {
	m := Metrics{
		Syncs: b.syncs.Load(),
	}
	b.life.RLock()
	defer b.life.RUnlock()
	if b.closed {
		return m
	}
	for _, c := range b.cs.all() {
		c.mu.Lock()
		m.SlotsUsed += int64(c.next) - int64(len(c.free))
		m.SlotsFree += int64(len(c.free))
		c.mu.Unlock()
		if info, err := c.file.Stat(); err == nil {
			m.Bytes += info.Size()
		}
	}
	return m
}
