package oblivistore

import "github.com/oblivkv/oblivkv/kv"

// stats reports the store's parameters, semaphores and counters.
func (c *Core) stats() kv.Stats {
	f := &c.front.st.Front
	var cached int
	var n Counters
	for _, g := range c.groups {
		s := &g.st.Group
		for p := range s.Parts {
			for l := range s.Parts[p].Levels {
				cached += len(s.Parts[p].Levels[l].Cached)
			}
		}
		n.add(s.Counters)
	}
	sem := c.Sems()
	return kv.Stats{Keys: int64(f.Keys), Extra: []kv.Stat{
		{Name: kv.StatPartitions, Value: float64(f.Partitions)},
		{Name: kv.StatLevels, Value: float64(f.Levels)},
		{Name: kv.StatEvictionRate, Value: f.Opts.EvictionRate},
		{Name: kv.StatEvictionCache, Value: float64(len(f.Mem))},
		{Name: kv.StatEvictionCacheMax, Value: float64(f.MaxEvictionCache)},
		{Name: kv.StatStorageCache, Value: float64(cached)},
		{Name: kv.StatShufflingBufferMax, Value: float64(n.MaxBuffer)},
		{Name: kv.StatSemaphoreEarly, Value: float64(sem.Early)},
		{Name: kv.StatSemaphoreBuffer, Value: float64(sem.Buffer)},
		{Name: kv.StatSemaphoreEvictions, Value: float64(sem.Evictions)},
		{Name: kv.StatSemaphoreIO, Value: float64(sem.IO)},
		{Name: kv.StatRealReads, Value: float64(n.RealReads)},
		{Name: kv.StatDummyReads, Value: float64(n.DummyReads)},
		{Name: kv.StatEarlyReads, Value: float64(n.EarlyReads)},
		{Name: kv.StatShuffleReads, Value: float64(n.ShuffleReads)},
		{Name: kv.StatShuffleWrites, Value: float64(n.ShuffleWrites)},
		{Name: kv.StatShuffles, Value: float64(n.Shuffles)},
		{Name: kv.StatEvicted, Value: float64(f.Evicted)},
		{Name: kv.StatDummyEvictions, Value: float64(f.DummyEvictions)},
	}}
}

// add adds a group's counters to n; MaxBuffer sums each group's peak.
func (n *Counters) add(g Counters) {
	n.RealReads += g.RealReads
	n.DummyReads += g.DummyReads
	n.EarlyReads += g.EarlyReads
	n.ShuffleReads += g.ShuffleReads
	n.ShuffleWrites += g.ShuffleWrites
	n.Shuffles += g.Shuffles
	n.MaxBuffer += g.MaxBuffer
}
