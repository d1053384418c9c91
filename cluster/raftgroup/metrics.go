package raftgroup

import (
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are a replica's Prometheus metrics (Group.Collector).
type metrics struct {
	labels        prometheus.Labels
	leaderChanges atomic.Uint64
	commit        prometheus.Histogram
	observations  chan raft.Observation
	observer      *raft.Observer
}

// newMetrics counts leader changes raft observes on r and times commits.
func newMetrics(r *raft.Raft, labels prometheus.Labels) *metrics {
	m := &metrics{labels: labels, observations: make(chan raft.Observation, 16), commit: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "oblivkv_raft_commit_seconds", ConstLabels: labels,
		Help:    "Time from proposing an entry on the leader to its being applied there.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	})}
	m.observer = raft.NewObserver(m.observations, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	r.RegisterObserver(m.observer)
	go func() {
		for range m.observations {
			m.leaderChanges.Add(1)
		}
	}()
	return m
}

// stop ends the counting of leader changes.
func (m *metrics) stop(r *raft.Raft) {
	r.DeregisterObserver(m.observer)
	close(m.observations)
}

// groupCollector is a Group's prometheus.Collector.
type groupCollector struct {
	g                                  *Group
	leaderChanges, term, isLeader, lag *prometheus.Desc
}

// Collector returns the replica's metrics, labelled with its id
// (replica): leader changes seen, commit latency on the leader, the term,
// whether it leads, and its apply lag (entries committed and not yet
// applied). A process serving several groups labels each group's with
// prometheus.WrapRegistererWith.
func (g *Group) Collector() prometheus.Collector {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, nil, g.metrics.labels)
	}
	return &groupCollector{g: g,
		leaderChanges: desc("oblivkv_raft_leader_changes_total", "Leader changes this replica observed (including to no leader)."),
		term:          desc("oblivkv_raft_term", "The replica's current term."),
		isLeader:      desc("oblivkv_raft_is_leader", "1 while this replica leads its group."),
		lag:           desc("oblivkv_raft_apply_lag", "Entries committed and not yet applied by this replica."),
	}
}

func (c *groupCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.leaderChanges
	ch <- c.term
	ch <- c.isLeader
	ch <- c.lag
	c.g.metrics.commit.Describe(ch)
}

func (c *groupCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.g.Status()
	leads := 0.0
	if c.g.IsLeader() {
		leads = 1
	}
	ch <- prometheus.MustNewConstMetric(c.leaderChanges, prometheus.CounterValue, float64(c.g.metrics.leaderChanges.Load()))
	ch <- prometheus.MustNewConstMetric(c.term, prometheus.GaugeValue, float64(s.Term))
	ch <- prometheus.MustNewConstMetric(c.isLeader, prometheus.GaugeValue, leads)
	ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(s.CommitIndex-min(s.AppliedIndex, s.CommitIndex)))
	c.g.metrics.commit.Collect(ch)
}
