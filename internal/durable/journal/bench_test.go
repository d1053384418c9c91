package journal

import (
	"fmt"
	"testing"
)

// benchSegment is how many records the benchmark commits between
// checkpoints: each checkpoint starts a new segment and drops the last.
const benchSegment = 256

// BenchmarkCommit measures the latency of one committer's Commit of a
// record of about 4 KiB and about 20 KiB (its encoded size) over a
// journal that has checkpointed a few times, so that segments have been
// started and dropped; the checkpoints between segments are not timed.
func BenchmarkCommit(b *testing.B) {
	for _, size := range []int{4 << 10, 20 << 10} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			keys := newKeys(b)
			j, err := Open(b.TempDir(), keys, Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer j.Close()
			rec := make([]byte, size-headerSize-trailerSize-keys.Overhead())
			commit := func() {
				lsn, err := j.Commit(0, rec)
				if err != nil {
					b.Fatal(err)
				}
				if lsn%benchSegment == 0 {
					b.StopTimer()
					if err := j.Checkpoint(b.Context(), 0, nil, lsn); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			}
			for range 3 * benchSegment {
				commit()
			}
			b.SetBytes(int64(size))
			for b.Loop() {
				commit()
			}
		})
	}
}
