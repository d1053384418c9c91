package slots

import (
	"errors"
	"io"
	"slices"
)

// scanChunk is how many bytes of a slot file load reads at once.
const scanChunk = 1 << 20

// load rebuilds the index from the slots: each address's value is its
// whole slot of the highest generation that counts, a tombstone making it
// deleted. A generation counts if the last sync point covers it, or if
// its Write was acknowledged once durable (per-write syncs) and all of
// its slots are whole: the Write returned, or a crash cut it off after
// its last fsync, and either way it is whole. Every other slot is free.
// A slot of a generation that does not count holds a Write the crash cut
// off: load erases it (settle). New Writes get generations above every
// one found.
func (b *Backend) load() error {
	m, g, err := openMarker(b.fs, b.dir, b.readOnly)
	if err != nil {
		return err
	}
	b.marker = m
	b.durable = g
	if b.cs, err = openClasses(b.fs, b.dir, b.readOnly); err != nil {
		return err
	}
	l := loading{g: g, highest: g, later: map[uint64]*ackedWrite{}}
	for _, c := range b.cs.all() {
		if err := b.loadClass(c, &l); err != nil {
			return err
		}
	}
	for _, w := range l.later {
		whole := len(w.slots) == int(w.batch&^acked)
		for _, f := range w.slots {
			if whole {
				b.adopt(f)
			} else {
				l.cutOff = append(l.cutOff, f.at)
			}
		}
	}
	if err := b.settle(l); err != nil {
		return err
	}
	b.nextGen = l.highest + 1
	used := map[uint16][]uint32{}
	b.idx.each(func(_ []byte, e entry) { used[e.at.class] = append(used[e.at.class], e.at.slot) })
	for _, c := range b.cs.all() {
		c.free = freeSlots(c.next, used[c.id])
	}
	return nil
}

// loading is what load learns as it reads the slots.
type loading struct {
	g       uint64                 // the last sync point
	highest uint64                 // the highest generation found
	later   map[uint64]*ackedWrite // acknowledged Writes after it, by generation
	cutOff  []loc                  // slots of other Writes after it
}

// ackedWrite is the slots found of a Write after the last sync point that
// was acknowledged once durable.
type ackedWrite struct {
	batch uint32
	slots []found
}

// found is a whole slot load read: where it is, and whose value (or
// tombstone) it holds.
type found struct {
	at   loc
	addr string
	tomb bool
}

// loadClass reads every slot of c, puts in the index those that win, and
// sets c.next past the file's last slot.
func (b *Backend) loadClass(c *class, l *loading) error {
	perChunk := max(1, scanChunk/c.size)
	buf := make([]byte, perChunk*c.size)
	for first := int64(0); ; first += perChunk {
		n, err := c.file.ReadAt(buf, first*c.size)
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		for i := int64(0); i*c.size < int64(n); i++ {
			slot := buf[i*c.size : min(int64(n), (i+1)*c.size)]
			b.consider(loc{class: c.id, slot: uint32(first + i)}, slot, l)
		}
		if n < len(buf) {
			c.next = uint32((first*c.size + int64(n) + c.size - 1) / c.size)
			return nil
		}
	}
}

// consider takes the slot at for its address if it is whole and no later
// than the last sync point; a later one waits for its Write's other slots
// if that Write was acknowledged once durable.
func (b *Backend) consider(at loc, raw []byte, l *loading) {
	h, ok := parseSlot(raw)
	if !ok {
		return
	}
	l.highest = max(l.highest, h.gen)
	at.gen = h.gen
	f := found{at: at, addr: string(h.addr), tomb: h.tomb}
	switch {
	case h.gen <= l.g:
		b.adopt(f)
	case h.batch&acked != 0:
		w := l.later[h.gen]
		if w == nil {
			w = &ackedWrite{batch: h.batch}
			l.later[h.gen] = w
		}
		w.slots = append(w.slots, f)
	default:
		l.cutOff = append(l.cutOff, at)
	}
}

// adopt makes f its address's slot, unless the index holds a later one.
func (b *Backend) adopt(f found) {
	if e, had := b.idx.get(f.addr); had && e.at.gen >= f.at.gen {
		return
	}
	b.idx.put(f.addr, entry{at: f.at, tomb: f.tomb})
}

// settle erases the slots of Writes the crash cut off (their headers
// zeroed fail their checksum) and passes a sync point covering every
// generation found, unless the store is open read-only. From then on
// every slot the index does not hold is free: no later open needs one to
// find a Write whole.
func (b *Backend) settle(l loading) error {
	if b.readOnly || l.highest == l.g {
		return nil
	}
	zero := make([]byte, headerSize)
	for _, at := range l.cutOff {
		c := b.cs.get(at.class)
		if _, err := c.file.WriteAt(zero, int64(at.slot)*c.size); err != nil {
			return err
		}
	}
	if err := b.cs.syncAll(); err != nil {
		return err
	}
	if err := b.marker.record(l.highest); err != nil {
		return err
	}
	b.durable = l.highest
	return nil
}

// freeSlots returns the slots below next that used does not hold.
func freeSlots(next uint32, used []uint32) []uint32 {
	slices.Sort(used)
	var free []uint32
	for s, i := uint32(0), 0; s < next; s++ {
		if i < len(used) && used[i] == s {
			i++
			continue
		}
		free = append(free, s)
	}
	return free
}
