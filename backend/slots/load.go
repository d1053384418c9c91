package slots

// load reads the index into memory and rebuilds the free slots: every
// slot the index on disk does not name is free.
func (b *Backend) load() error {
	cs, err := openClasses(b.fs, b.dir, b.readOnly)
	if err != nil {
		return err
	}
	b.cs = cs
	it, err := b.db.NewIter(nil)
	if err != nil {
		return err
	}
	used := map[uint16][]uint32{}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := decodeValue(it.Value(), b.cs.find)
		if err != nil {
			it.Close()
			return err
		}
		b.idx.put(string(it.Key()), v)
		if v.at.valid() {
			used[v.at.class] = append(used[v.at.class], v.at.slot)
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	b.cs.rebuild(used)
	return nil
}
