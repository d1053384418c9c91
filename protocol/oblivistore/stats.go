package oblivistore

import "github.com/oblivkv/oblivkv/kv"

// stats reports the store's parameters, semaphores and counters.
func (c *Core) stats() kv.Stats {
	st := &c.st
	var cached int
	for p := range st.Parts {
		for l := range st.Parts[p].Levels {
			cached += len(st.Parts[p].Levels[l].Cached)
		}
	}
	n := st.Counters
	stat := func(name string, v float64) kv.Stat { return kv.Stat{Name: name, Value: v} }
	return kv.Stats{Keys: int64(st.Keys), Extra: []kv.Stat{
		stat("partitions", float64(st.Geo.Partitions)),
		stat("levels", float64(st.Geo.Top+1)),
		stat("eviction_rate", st.Opts.EvictionRate),
		stat("eviction_cache", float64(len(st.Mem))),
		stat("eviction_cache_max", float64(n.MaxEvictionCache)),
		stat("storage_cache", float64(cached)),
		stat("shuffling_buffer_max", float64(n.MaxBuffer)),
		stat("semaphore_early", float64(st.Sem.Early)),
		stat("semaphore_buffer", float64(st.Sem.Buffer)),
		stat("semaphore_evictions", float64(st.Sem.Evictions)),
		stat("semaphore_io", float64(st.Sem.IO)),
		stat("real_reads", float64(n.RealReads)),
		stat("dummy_reads", float64(n.DummyReads)),
		stat("early_reads", float64(n.EarlyReads)),
		stat("shuffle_reads", float64(n.ShuffleReads)),
		stat("shuffle_writes", float64(n.ShuffleWrites)),
		stat("shuffles", float64(n.Shuffles)),
		stat("evicted", float64(n.Evicted)),
		stat("dummy_evictions", float64(n.DummyEvictions)),
	}}
}
