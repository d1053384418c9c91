package kv

// The names of the statistics in Stats.Extra, each declared here once
// with what it reports; INFO and /metrics show them by these names. Where
// two protocols report the same thing they use the same name, and a
// protocol names no statistic that is not declared here. Counters only
// grow; sizes and parameters are as they stand.

// The journal's (every durable store's), added by kv to the protocol's.
const (
	StatJournalRecords        = "journal_records"         // records appended since the store was opened
	StatJournalBytes          = "journal_bytes"           // bytes written to the journal since then
	StatJournalFsyncs         = "journal_fsyncs"          // fsyncs of the journal since then
	StatJournalCheckpoints    = "journal_checkpoints"     // checkpoints written since then
	StatJournalSegmentsReused = "journal_segments_reused" // segments written over a dropped segment's file since then
)

// The embedded disk backend's on its pebble engine, added by kv when the
// store runs on it (Config.EngineStats).
const (
	StatDiskWriteAmplification = "disk_write_amplification" // bytes flushes and compactions wrote per byte flushed
	StatDiskCompactions        = "disk_compactions"         // compactions since the store was opened
	StatDiskFlushes            = "disk_flushes"             // memtable flushes since then
	StatDiskWriteStalls        = "disk_write_stalls"        // times writes waited for a flush or compaction since then
	StatDiskWriteStallSeconds  = "disk_write_stall_seconds" // the time they waited
	StatDiskL0Files            = "disk_l0_files"            // files in level 0 now (many: compactions fall behind)
	StatDiskCacheHitRate       = "disk_cache_hit_rate"      // block cache hits over lookups since then
	StatDiskCacheBytes         = "disk_cache_bytes"         // bytes the block cache holds now
	StatDiskCacheCapacity      = "disk_cache_capacity"      // the most it may hold, in bytes (--disk-cache)
	StatDiskWALBytes           = "disk_wal_bytes"           // bytes written to pebble's write-ahead log since then
	StatDiskBytes              = "disk_bytes"               // bytes the database occupies on disk now (either engine)
)

// The embedded disk backend's on its slots engine (and disk_bytes).
const (
	StatDiskSlotsUsed = "disk_slots_used" // slots holding a value or a tombstone now, or replaced and waiting for a sync point
	StatDiskSlotsFree = "disk_slots_free" // slots inside the slot files free for reuse now
	StatDiskSyncs     = "disk_syncs"      // sync points (the slot files fsynced, then the generation they cover recorded) since the store was opened
)

// Shared by several protocols.
const (
	StatTreeLevels       = "tree_levels"       // levels of a tree, L+1 (pathoram, taostore, treebeard)
	StatBucketZ          = "bucket_z"          // block slots of a bucket, Z (taostore, treebeard)
	StatStashSize        = "stash_size"        // blocks in the stash now (treebeard: in all its shards)
	StatStashMax         = "stash_max"         // the stash's high-water mark, blocks (treebeard: its largest shard's)
	StatRealReads        = "real_reads"        // reads of storage for a request's block (oblivistore: of the level holding it)
	StatFakeReads        = "fake_reads"        // path reads of a random path for a request whose block is in the stash or on its way (taostore, treebeard)
	StatReadRetries      = "read_retries"      // reads issued again, unchanged, after storage failed them
	StatCacheHits        = "cache_hits"        // wanted blocks or values found in trusted memory, with no storage read for them
	StatBatches          = "batches"           // batches sent to storage (waffle, cloak)
	StatRealQueries      = "real_queries"      // a batch's queries that serve requests, over all batches (waffle, cloak)
	StatCheckpointErrors = "checkpoint_errors" // checkpoints that failed (tried again later)
)

// pathoram's.
const (
	StatBucketBytes = "bucket_bytes" // bytes of one sealed bucket
)

// taostore's.
const (
	StatWriteBackThreshold = "k"                 // flushed paths after which they are written back, k
	StatSubtreeNodes       = "subtree_nodes"     // buckets in the proxy's subtree now
	StatSubtreeMax         = "subtree_max"       // the subtree's high-water mark, buckets
	StatWriteBacks         = "write_backs"       // write-backs issued
	StatStaleBuckets       = "stale_buckets"     // buckets storage refused as older than what it holds
	StatWriteBackErrors    = "write_back_errors" // write-backs storage failed
)

// treebeard's.
const (
	StatTrees          = "trees"            // ORAM trees (shards)
	StatBucketS        = "bucket_s"         // dummy slots of a bucket, S
	StatCachedLevels   = "cached_levels"    // top levels of every tree held in trusted memory
	StatCachedBlocks   = "cached_blocks"    // blocks those levels hold now
	StatStashShards    = "stash_shards"     // Stash shards
	StatStashHits      = "stash_hits"       // requests answered from a shard's stash
	StatPathReads      = "path_reads"       // path reads the trees served
	StatMultiPathReads = "multi_path_reads" // reads of storage, each for a union of paths
	StatBucketsPerPath = "buckets_per_path" // buckets read per path read
	StatReshuffles     = "reshuffles"       // buckets rewritten by an early reshuffle
	StatEvictions      = "evictions"        // evictions the trees ran
	StatEvictedPaths   = "evicted_paths"    // paths those evictions wrote
	StatReadErrors     = "read_errors"      // tree operations whose read storage failed
	StatMetadataReads  = "metadata_reads"   // bucket metadata records read from storage
	StatEvictionErrors = "eviction_errors"  // tree operations whose eviction storage failed
	StatMessagesResent = "messages_resent"  // messages between layers sent again after none answered
	StatMessageCopies  = "message_copies"   // copies of a message answered from its record, not run again
	StatRepliesHeld    = "replies_held"     // replies a layer keeps until their senders acknowledge them
	StatEpochRequests  = "epoch_requests"   // requests the Routers' collecting epochs hold now
)

// waffle's (Waffle's parameters by the paper's letters).
const (
	StatWaffleB          = "b"                 // batch size, B
	StatWaffleR          = "r"                 // real queries per batch, R
	StatWaffleFD         = "f_d"               // fake queries on dummy objects per batch, f_D
	StatWaffleD          = "d"                 // dummy objects, D
	StatWaffleC          = "c"                 // cache size, C
	StatCacheSize        = "cache_size"        // real objects in the cache now
	StatFakeReal         = "fake_real"         // fake queries on real objects, over all batches
	StatFakeDummy        = "fake_dummy"        // fake queries on dummy objects, over all batches
	StatDeleteErrors     = "delete_errors"     // deletes of old storage ids storage failed
	StatTheoreticalAlpha = "theoretical_alpha" // Theorem 7.1's bound alpha
	StatTheoreticalBeta  = "theoretical_beta"  // Theorem 7.2's bound beta
)

// cloak's.
const (
	StatBeta                   = "beta"                      // batch size, beta
	StatSets                   = "sets"                      // reuse-distance sets
	StatB1                     = "b_1"                       // the first set's budget, b_1
	StatZipfS                  = "zipf_s"                    // the budgets' Zipf exponent, s
	StatDeltaMs                = "delta_ms"                  // the batch interval, Delta, in milliseconds
	StatAddresses              = "addresses"                 // physical addresses on storage
	StatBatchUtilisation       = "batch_utilisation"         // real queries per batch slot
	StatDummyQueries           = "dummy_queries"             // a batch's queries of dummy addresses, over all batches
	StatCoalescedReads         = "coalesced_reads"           // reads answered by another read of the same key in flight
	StatReadsFromPendingWrites = "reads_from_pending_writes" // reads answered by a write waiting for its batch
	StatPendingKeys            = "pending_keys"              // keys waiting for a batch now
	StatBackpressureWaits      = "backpressure_waits"        // requests that waited for room in the pending map
	StatBatchErrors            = "batch_errors"              // batches storage failed (sent again)
	StatTicks                  = "ticks"                     // batch intervals handled since the store started, each a batch, busy or idle
)

// oblivistore's.
const (
	StatPartitions         = "partitions"           // partitions
	StatLevels             = "levels"               // levels of a partition
	StatEvictionRate       = "eviction_rate"        // evictions per request
	StatEvictionCache      = "eviction_cache"       // blocks in the eviction cache now
	StatEvictionCacheMax   = "eviction_cache_max"   // the eviction cache's high-water mark, blocks
	StatStorageCache       = "storage_cache"        // blocks in the storage cache now
	StatShufflingBufferMax = "shuffling_buffer_max" // the shuffling buffer's high-water mark, blocks
	StatSemaphoreEarly     = "semaphore_early"      // the early cache-ins semaphore now
	StatSemaphoreBuffer    = "semaphore_buffer"     // the shuffling buffer semaphore now
	StatSemaphoreEvictions = "semaphore_evictions"  // the eviction semaphore now
	StatSemaphoreIO        = "semaphore_io"         // the shuffling I/O semaphore now
	StatDummyReads         = "dummy_reads"          // slots read from a level that does not hold the block wanted
	StatEarlyReads         = "early_reads"          // slots read early from a level marked for a shuffle (early cache-ins)
	StatShuffleReads       = "shuffle_reads"        // blocks the shuffler read
	StatShuffleWrites      = "shuffle_writes"       // blocks the shuffler wrote
	StatShuffles           = "shuffles"             // shuffles completed
	StatEvicted            = "evicted"              // evictions that took a real block from the eviction cache
	StatDummyEvictions     = "dummy_evictions"      // evictions with no block to take
)
