package oblivistore

import "github.com/oblivkv/oblivkv/kv"

// stats reports the store's parameters, semaphores and counters.
func (c *Core) stats() kv.Stats {
	f, s := c.front(), c.server()
	var cached int
	for p := range s.Parts {
		for l := range s.Parts[p].Levels {
			cached += len(s.Parts[p].Levels[l].Cached)
		}
	}
	n, sem := s.Counters, c.Sems()
	stat := func(name string, v float64) kv.Stat { return kv.Stat{Name: name, Value: v} }
	return kv.Stats{Keys: int64(f.Keys), Extra: []kv.Stat{
		stat("partitions", float64(f.Partitions)),
		stat("levels", float64(f.Levels)),
		stat("eviction_rate", f.Opts.EvictionRate),
		stat("eviction_cache", float64(len(f.Mem))),
		stat("eviction_cache_max", float64(f.MaxEvictionCache)),
		stat("storage_cache", float64(cached)),
		stat("shuffling_buffer_max", float64(n.MaxBuffer)),
		stat("semaphore_early", float64(sem.Early)),
		stat("semaphore_buffer", float64(sem.Buffer)),
		stat("semaphore_evictions", float64(sem.Evictions)),
		stat("semaphore_io", float64(sem.IO)),
		stat("real_reads", float64(n.RealReads)),
		stat("dummy_reads", float64(n.DummyReads)),
		stat("early_reads", float64(n.EarlyReads)),
		stat("shuffle_reads", float64(n.ShuffleReads)),
		stat("shuffle_writes", float64(n.ShuffleWrites)),
		stat("shuffles", float64(n.Shuffles)),
		stat("evicted", float64(f.Evicted)),
		stat("dummy_evictions", float64(f.DummyEvictions)),
	}}
}
