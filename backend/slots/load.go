package slots

import (
	"errors"
	"io"
	"slices"
)

// scanChunk is how many bytes of a slot file load reads at once.
const scanChunk = 1 << 20

// load rebuilds the index from the slots: each address's value is its
// whole slot of the highest generation no later than the last sync point,
// a tombstone making it deleted. Every other slot is free. A slot of a
// later generation holds a Write the crash cut off: load erases it, or a
// later sync point, covering its generation, would bring it back. New
// Writes get generations above every one found.
func (b *Backend) load() error {
	m, g, err := openMarker(b.fs, b.dir, b.readOnly)
	if err != nil {
		return err
	}
	b.marker = m
	b.durable.Store(g)
	if b.cs, err = openClasses(b.fs, b.dir, b.readOnly); err != nil {
		return err
	}
	l := loading{g: g, highest: g}
	for _, c := range b.cs.all() {
		if err := b.loadClass(c, &l); err != nil {
			return err
		}
	}
	if err := b.erase(l.cutOff); err != nil {
		return err
	}
	b.nextGen = l.highest + 1
	used := map[uint16][]uint32{}
	b.idx.each(func(_ string, e entry) { used[e.at.class] = append(used[e.at.class], e.at.slot) })
	for _, c := range b.cs.all() {
		c.free = freeSlots(c.next, used[c.id])
	}
	return nil
}

// loading is what load learns as it reads the slots.
type loading struct {
	g       uint64 // the last sync point
	highest uint64 // the highest generation found
	cutOff  []loc  // slots of Writes after the last sync point
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

// consider takes the slot at for its address if it is whole, no later
// than the last sync point, and later than the one the index holds.
func (b *Backend) consider(at loc, raw []byte, l *loading) {
	h, ok := parseSlot(raw)
	if !ok {
		return
	}
	l.highest = max(l.highest, h.gen)
	if h.gen > l.g {
		l.cutOff = append(l.cutOff, at)
		return
	}
	if e, had := b.idx.get(h.addr); had && e.at.gen >= h.gen {
		return
	}
	at.gen = h.gen
	b.idx.put(h.addr, entry{at: at, tomb: h.tomb})
}

// erase zeroes the headers of slots, which then fail their checksum. The
// next sync point makes that durable before it covers their generations.
func (b *Backend) erase(slots []loc) error {
	if b.readOnly {
		return nil
	}
	zero := make([]byte, headerSize)
	for _, at := range slots {
		c := b.cs.get(at.class)
		if _, err := c.file.WriteAt(zero, int64(at.slot)*c.size); err != nil {
			return err
		}
	}
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
