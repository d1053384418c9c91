package slots

import "sync"

// groupSync shares one run of a sync function among callers that ask
// while it runs: each caller returns once a run that began after its call
// has finished, so every write it made before calling is covered, and
// callers arriving together pay for one fsync, not one each.
type groupSync struct {
	mu       sync.Mutex
	cond     sync.Cond
	running  bool
	started  uint64 // runs begun
	finished uint64 // the last run finished
	err      error  // that run's error
}

func (g *groupSync) do(sync func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cond.L == nil {
		g.cond.L = &g.mu
	}
	want := g.started + 1 // the running one, if any, may have begun before this call
	for g.finished < want {
		if g.running {
			g.cond.Wait()
			continue
		}
		g.running = true
		g.started++
		run := g.started
		g.mu.Unlock()
		err := sync()
		g.mu.Lock()
		g.running, g.finished, g.err = false, run, err
		g.cond.Broadcast()
	}
	return g.err
}
