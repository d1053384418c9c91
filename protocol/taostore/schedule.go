package taostore

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/oblivkv/oblivkv/audit"
)

// WriteBack is one write-back of a tree ORAM as storage saw it: the
// leaves whose paths it wrote (each once), and when its call began.
type WriteBack struct {
	Leaves []uint64
	Start  time.Duration
}

// WriteBackSchedule checks TaORAM's write-back rule (TaoStore Sec. IV-B
// step 3): "as soon as k new paths are inserted into subtree and flushed,
// the Processor writes back these k paths". Storage cannot see the order
// in which the proxy flushes the paths it read, only when each read
// returned, so the check is that some flush order explains the log: the
// path reads split into one group of exactly k per write-back and fewer
// than k left over (those flushed since the last write-back), every read
// of a group returned before its write-back began, and each write-back
// wrote exactly the paths of its group (every leaf of the write-back read
// by one of the group's reads, and no read of the group outside them).
// reads and wbs are every path read and write-back of a log taken when no
// write-back is in flight.
//
// It is exact: a write-back started by the requests (one per Put), one
// that writes fewer paths than were read (only the real reads' paths), or
// a count of write-backs other than reads/k fails it. Which paths a
// write-back holds is checked by the caller: that the buckets written are
// exactly those of its leaves' paths is a property of the tree layout.
func WriteBackSchedule(name string, reads []audit.PathRead, wbs []WriteBack, k int) audit.Check {
	var violations []string
	if want := len(reads) / k; len(wbs) != want {
		violations = append(violations, fmt.Sprintf("%d write-backs after %d path reads; every %d flushed paths make one, so %d", len(wbs), len(reads), k, want))
	}
	for i, w := range wbs {
		if len(w.Leaves) > k {
			violations = append(violations, fmt.Sprintf("write-back %d (at %v) writes %d paths, more than k = %d", i, w.Start, len(w.Leaves), k))
		}
	}
	if len(violations) == 0 {
		for _, i := range unexplained(reads, wbs, k) {
			violations = append(violations, fmt.Sprintf("no split of the reads into groups of %d gives write-back %d (at %v, %d paths) a group of reads of its paths that returned before it", k, i, wbs[i].Start, len(wbs[i].Leaves)))
		}
	}
	c := audit.Exact(name, violations)
	if len(violations) == 0 {
		c.Detail = fmt.Sprintf("%d path reads, %d write-backs of the paths of %d reads each", len(reads), len(wbs), k)
	}
	return c
}

// unexplained returns the write-backs left short when reads are assigned
// to write-backs as WriteBackSchedule requires: a read may go to a
// write-back that began after it returned and wrote its leaf; each
// write-back takes k reads, at least one per leaf it wrote. It requires
// len(w.Leaves) <= k for every w.
//
// It is a maximum flow from the reads to the sink. Each (write-back,
// leaf) pair is a node with an edge of capacity 1 to the sink (the read
// the leaf needs) and one to its write-back, which has an edge of
// capacity k-|leaves| to the sink (the reads that repeat a leaf): every
// edge into the sink is full exactly when an assignment exists. A read
// reaches the pairs of its leaf through a chain, one node per write-back
// of the leaf in order of start, each leading to its pair and to the next:
// it enters at the first write-back that began after it returned, so the
// network grows with the reads and leaves, not with their product.
func unexplained(reads []audit.PathRead, wbs []WriteBack, k int) []int {
	g := newFlow(2 + len(wbs))
	src, sink := 0, 1
	wbNode := func(j int) int { return 2 + j }
	byLeaf := map[uint64][]int{} // leaf -> write-backs that wrote it, in order of start
	pairs := make([][]int, len(wbs))
	for j, w := range wbs {
		for _, l := range w.Leaves {
			byLeaf[l] = append(byLeaf[l], j)
		}
	}
	chain := map[uint64][]int{} // leaf -> its chain's nodes, in the order of byLeaf
	for l, js := range byLeaf {
		slices.SortStableFunc(js, func(a, b int) int { return cmp.Compare(wbs[a].Start, wbs[b].Start) })
		for i, j := range js {
			pair, link := g.node(), g.node()
			g.edge(pair, sink, 1)
			g.edge(pair, wbNode(j), k)
			g.edge(link, pair, k)
			if i > 0 {
				g.edge(chain[l][i-1], link, len(reads))
			}
			chain[l] = append(chain[l], link)
			pairs[j] = append(pairs[j], pair)
		}
	}
	for j, w := range wbs {
		g.edge(wbNode(j), sink, k-len(w.Leaves))
	}
	for _, r := range reads {
		js := byLeaf[r.Leaf]
		if i, _ := slices.BinarySearchFunc(js, r.End, func(j int, end time.Duration) int {
			return cmp.Compare(wbs[j].Start, end)
		}); i < len(js) {
			read := g.node()
			g.edge(src, read, 1)
			g.edge(read, chain[r.Leaf][i], 1)
		}
	}
	g.maxFlow(src, sink)
	var short []int
	for j := range wbs {
		got := g.flowInto(wbNode(j), sink)
		for _, p := range pairs[j] {
			got += g.flowInto(p, sink)
		}
		if got < k {
			short = append(short, j)
		}
	}
	return short
}

// flow is a flow network for Dinic's maximum-flow algorithm. It is
// written here rather than taken from gonum's graph/network, whose
// MaxFlowDinic works through graph interfaces and took 150 s on the
// network of one audit's 4,000 reads, where this takes milliseconds, and
// reports only the total flow, not which write-backs are short.
type flow struct {
	adj   [][]int // node -> indices into edges
	edges []flowEdge
	level []int
	next  []int
}

type flowEdge struct{ to, cap int }

func newFlow(nodes int) *flow { return &flow{adj: make([][]int, nodes)} }

// node adds a node and returns it.
func (f *flow) node() int {
	f.adj = append(f.adj, nil)
	return len(f.adj) - 1
}

// edge adds an edge of capacity c from u to v, and its residual.
func (f *flow) edge(u, v, c int) {
	f.adj[u] = append(f.adj[u], len(f.edges))
	f.edges = append(f.edges, flowEdge{v, c})
	f.adj[v] = append(f.adj[v], len(f.edges))
	f.edges = append(f.edges, flowEdge{u, 0})
}

// flowInto returns the flow on the edges from u to v.
func (f *flow) flowInto(u, v int) int {
	total := 0
	for _, e := range f.adj[u] {
		if e%2 == 0 && f.edges[e].to == v {
			total += f.edges[e^1].cap
		}
	}
	return total
}

// maxFlow pushes a maximum flow from s to t.
func (f *flow) maxFlow(s, t int) {
	for f.bfs(s, t) {
		f.next = slices.Repeat([]int{0}, len(f.adj))
		for f.dfs(s, t, int(^uint(0)>>1)) > 0 {
		}
	}
}

// bfs levels the residual graph from s and reports whether t is reached.
func (f *flow) bfs(s, t int) bool {
	f.level = slices.Repeat([]int{-1}, len(f.adj))
	f.level[s] = 0
	queue := []int{s}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		for _, e := range f.adj[u] {
			if v := f.edges[e].to; f.edges[e].cap > 0 && f.level[v] < 0 {
				f.level[v] = f.level[u] + 1
				queue = append(queue, v)
			}
		}
	}
	return f.level[t] >= 0
}

// dfs pushes up to limit units along level-increasing paths from u to t.
func (f *flow) dfs(u, t, limit int) int {
	if u == t {
		return limit
	}
	for ; f.next[u] < len(f.adj[u]); f.next[u]++ {
		e := f.adj[u][f.next[u]]
		v := f.edges[e].to
		if f.edges[e].cap == 0 || f.level[v] != f.level[u]+1 {
			continue
		}
		if pushed := f.dfs(v, t, min(limit, f.edges[e].cap)); pushed > 0 {
			f.edges[e].cap -= pushed
			f.edges[e^1].cap += pushed
			return pushed
		}
	}
	return 0
}
