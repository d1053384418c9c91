package cluster

import (
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"
)

// Live is the configuration file as a running process sees it: the
// Config it started with, read again from the file when the process
// meets a process id it does not know (a replica added to a group since
// it started). A reload takes effect only if the file parses and changes
// nothing but groups' replica lists: the store's shape, the routers, the
// number of groups, their storage and the directories are fixed while
// the cluster runs, and a file that changes them is refused (logged),
// the config in use kept.
type Live struct {
	path  string        // "" never reloads
	every time.Duration // the file is read at most once per every
	log   *slog.Logger

	mu   sync.Mutex
	cfg  *Config
	read time.Time // when the file was last read
}

// ReloadEvery is how often at most a Live reads its file again.
const ReloadEvery = time.Second

// NewLive returns the Live view of the file at path, which cfg was
// loaded from; its refusals of the file go to log (nil: discarded).
func NewLive(path string, cfg *Config, log *slog.Logger) *Live {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Live{path: path, every: ReloadEvery, log: log, cfg: cfg}
}

// Static returns a Live of cfg alone, which never reloads: for tests and
// callers with no file.
func Static(cfg *Config) *Live { return NewLive("", cfg, nil) }

// Config returns the configuration in use. It is never changed in
// place: a reload replaces it.
func (l *Live) Config() *Config {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cfg
}

// Reload reads the file again, unless it was read less than ReloadEvery
// ago or there is none, and returns the configuration in use after it,
// with why the file was refused if it was.
func (l *Live) Reload() (*Config, error) { return l.reload(false) }

// Find returns what find finds in the configuration in use or, when it
// finds nothing there, in the file read again (Reload): a process id the
// process does not know may be a replica added since it started.
func Find[T any](l *Live, find func(*Config) (T, bool)) (T, bool) { return findIn(l, false, find) }

// FindNow is Find reading the file again however recently it was read:
// for a rare request that follows an edit of the file (the operator's
// add-voter).
func FindNow[T any](l *Live, find func(*Config) (T, bool)) (T, bool) { return findIn(l, true, find) }

func findIn[T any](l *Live, now bool, find func(*Config) (T, bool)) (T, bool) {
	if v, ok := find(l.Config()); ok {
		return v, true
	}
	cfg, _ := l.reload(now)
	return find(cfg)
}

func (l *Live) reload(now bool) (*Config, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.path == "" || (!now && time.Since(l.read) < l.every) {
		return l.cfg, nil
	}
	l.read = time.Now()
	next, err := Load(l.path)
	if err == nil {
		err = l.cfg.changesOnlyReplicas(next)
	}
	if err != nil {
		l.log.Error("cluster config not reloaded: keeping the one in use", "file", l.path, "err", err)
		return l.cfg, err
	}
	if !reflect.DeepEqual(l.cfg, next) {
		l.log.Info("cluster config reloaded", "file", l.path, "processes", len(next.Nodes()))
	}
	l.cfg = next
	return next, nil
}

// changesOnlyReplicas returns an error naming what next changes of c
// beyond its groups' replica lists.
func (c *Config) changesOnlyReplicas(next *Config) error {
	var diffs []string
	note := func(differs bool, what string) {
		if differs {
			diffs = append(diffs, what)
		}
	}
	note(!reflect.DeepEqual(c.Store, next.Store), "store")
	note(c.Root != next.Root || c.Certs != next.Certs || c.Key != next.Key, "root, certs or key")
	note(!slices.Equal(c.Routers, next.Routers), "routers")
	note(len(c.Stash) != len(next.Stash), "the number of stash groups")
	note(len(c.ORAM) != len(next.ORAM), "the number of oram groups")
	for i := range min(len(c.ORAM), len(next.ORAM)) {
		a, b := c.ORAM[i], next.ORAM[i]
		note(a.Storage != b.Storage || a.RedisServer != b.RedisServer, fmt.Sprintf("oram[%d]'s storage", i))
	}
	if len(diffs) > 0 {
		return fmt.Errorf("it changes %s: only groups' replicas may change while the cluster runs", strings.Join(diffs, ", "))
	}
	return nil
}
