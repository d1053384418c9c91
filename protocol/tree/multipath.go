package tree

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// MultiPathCost simulates the bandwidth of multi-path reads (Treebeard
// Sec. 5.3.1, evaluated in Sec. 7.4 "Bandwidth Analysis", Table 1) and
// returns the average number of buckets fetched per client request.
//
// It draws requests leaves independently and uniformly at random from rng
// (the path a read-path request reads is a uniformly random leaf, as in
// Ring ORAM), groups them into consecutive batches of batch leaves, and
// counts for each batch len(g.Union(leaves)): the buckets a multi-path read
// fetches, each bucket shared by several paths once. When batch does not
// divide requests, the last batch is short (requests mod batch leaves); a
// short batch shares fewer buckets, so its requests cost slightly more
// than those of a full batch, and the result then sits slightly above
// ExpectedMultiPathCost(g, batch). With batch 1 every request reads its
// whole path and the result is exactly g.L+1 (Ring ORAM's cost).
//
// It panics when batch or requests is not positive.
func MultiPathCost(g Geometry, batch, requests int, rng *rand.Rand) float64 {
	if batch < 1 || requests < 1 {
		panic(fmt.Sprintf("tree: MultiPathCost(batch %d, requests %d): both must be positive", batch, requests))
	}
	leaves := make([]uint64, 0, batch)
	var union []uint64
	total := 0
	for done := 0; done < requests; done += len(leaves) {
		leaves = leaves[:0]
		for range min(batch, requests-done) {
			leaves = append(leaves, rng.Uint64N(g.Leaves()))
		}
		union = g.Union(leaves, union)
		total += len(union)
	}
	return float64(total) / float64(requests)
}

// ExpectedMultiPathCost returns the expected number of buckets a
// multi-path read of batch independent, uniformly random paths fetches
// (Treebeard Sec. 5.3.1), divided by batch: the expected buckets per
// request that MultiPathCost estimates when batch divides requests.
//
// Level l holds 2^l buckets, and one random path passes through a given
// one of them with probability 2^-l, so batch independent paths miss it
// with probability (1-2^-l)^batch. By linearity of expectation the union
// holds on average
//
//	sum over l = 0..L of 2^l * (1 - (1-2^-l)^batch)
//
// distinct buckets. For the tree of Treebeard's Table 1 (L = 20, 21
// levels) this gives 21 for batch 1, 18.74 for batch 5, and 15.46, 14.46,
// 12.14 and 10.14 for batches 50, 100, 500 and 2000: the paper's values,
// except that the one it labels B=5 is that of batch 50 (see
// docs/protocols.md).
//
// It panics when batch is not positive.
func ExpectedMultiPathCost(g Geometry, batch int) float64 {
	if batch < 1 {
		panic(fmt.Sprintf("tree: ExpectedMultiPathCost(batch %d): batch must be positive", batch))
	}
	b := float64(batch)
	sum := 0.0
	for l := 0; l <= g.L; l++ {
		// 1-(1-p)^b computed as -expm1(b*log1p(-p)), accurate when p is
		// tiny; at the root p = 1 gives log1p(-1) = -Inf and exactly 1.
		p := math.Ldexp(1, -l)
		sum += math.Ldexp(1, l) * -math.Expm1(b*math.Log1p(-p))
	}
	return sum / b
}
