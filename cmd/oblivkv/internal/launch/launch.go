// Package launch runs a whole cluster on one machine as child processes,
// for `oblivkv cluster up`: first a redis-server for each ORAM group that
// asks for one (redis_server), then every process of the configuration,
// each the oblivkv binary running its role's command (`oblivkv cluster
// ROLE --config FILE --id ID`) with its output in ROOT/ID/log.
//
// It owns those children: it starts them, reports those that exit on
// their own, and stops them in order (routers, Stash replicas, ORAM
// replicas, redis-servers), each tier with SIGTERM and, after a grace,
// SIGKILL. The children run in a process group of their own, so that a
// terminal's Ctrl-C reaches only the launcher, which stops them in that
// order; on Linux a child gets SIGTERM if the launcher dies first. It
// never restarts a child, never reads what a child writes, and never
// writes a certificate or a key: the command does, before.
package launch

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/oblivkv/oblivkv/cluster"
)

// Options are how a cluster is launched.
type Options struct {
	Exe       string // the oblivkv binary the processes run
	Config    string // the configuration file, as the processes are given it
	Plaintext bool   // the processes run with --plaintext
	// ProfileDir, if set, is where each process writes a CPU profile of
	// its run (its --cpuprofile), named ID.pprof.
	ProfileDir  string
	RedisServer string // the redis-server binary; default "redis-server" on $PATH
	// Grace is how long Stop waits for a tier of children after SIGTERM
	// before it sends SIGKILL.
	Grace time.Duration
}

// Child is one child process.
type Child struct {
	Name    string // a process's id, or redis-PORT
	Role    string // router, stash, oram or redis
	PID     int
	Listens string // its addresses, labelled
	Log     string // the file its output goes to
}

// Exit is a child's end.
type Exit struct {
	Child
	Err error // how it ended (nil: status 0)
}

// child is a running child.
type child struct {
	Child
	cmd    *exec.Cmd
	exited chan struct{} // closed once it has been reaped; err is set then
	err    error
}

// Cluster is a launched cluster.
type Cluster struct {
	tiers    [][]*child // in the order Stop stops them
	exits    chan Exit
	stopping atomic.Bool
}

// redisReady bounds how long Start waits for a redis-server to answer.
const redisReady = 10 * time.Second

// Start launches cfg's redis-servers and then its processes, ORAM
// replicas first and routers last. If one cannot be started, those
// started are stopped.
func Start(cfg *cluster.Config, o Options) (*Cluster, error) {
	c := &Cluster{tiers: make([][]*child, 4), exits: make(chan Exit, len(cfg.Nodes())+len(cfg.ORAM))}
	if err := c.startRedis(cfg, o); err != nil {
		c.Stop(o.Grace)
		return nil, err
	}
	for _, role := range []string{"oram", "stash", "router"} {
		for _, n := range cfg.Nodes() {
			if n.Role != role {
				continue
			}
			if err := c.startProcess(cfg, n, o); err != nil {
				c.Stop(o.Grace)
				return nil, err
			}
		}
	}
	return c, nil
}

// tier is the index in Cluster.tiers of the children of a role.
func tier(role string) int {
	return map[string]int{"router": 0, "stash": 1, "oram": 2, "redis": 3}[role]
}

// startProcess starts process n, its output appended to ROOT/ID/log.
func (c *Cluster) startProcess(cfg *cluster.Config, n cluster.Node, o Options) error {
	dir, err := makeDir(cfg.DataDir(n.ID))
	if err != nil {
		return err
	}
	args := []string{"cluster", n.Role, "--config", o.Config, "--id", n.ID}
	if o.Plaintext {
		args = append(args, "--plaintext")
	}
	if o.ProfileDir != "" {
		args = append(args, "--cpuprofile", filepath.Join(o.ProfileDir, n.ID+".pprof"))
	}
	ch := &child{Child: Child{Name: n.ID, Role: n.Role, Listens: listens(n), Log: filepath.Join(dir, "log")}}
	return c.start(ch, exec.Command(o.Exe, args...))
}

// makeDir makes directory dir if missing and returns its absolute path.
func makeDir(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	return dir, os.MkdirAll(dir, 0o700)
}

// listens labels n's addresses.
func listens(n cluster.Node) string {
	labels := []string{"rpc", "raft"}
	if n.Role == "router" {
		labels = []string{"resp", "rpc"}
	}
	var parts []string
	for i, a := range n.Addrs {
		parts = append(parts, labels[i]+" "+a)
	}
	if n.HTTP != "" {
		parts = append(parts, "http "+n.HTTP)
	}
	return strings.Join(parts, "  ")
}

// start starts cmd as ch, its output appended to ch.Log, and reaps it
// when it exits.
func (c *Cluster) start(ch *child, cmd *exec.Cmd) error {
	out, err := os.OpenFile(ch.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer out.Close() // the child has its own descriptor
	cmd.Stdout, cmd.Stderr, cmd.SysProcAttr = out, out, childAttrs()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", ch.Name, err)
	}
	ch.cmd, ch.PID, ch.exited = cmd, cmd.Process.Pid, make(chan struct{})
	c.tiers[tier(ch.Role)] = append(c.tiers[tier(ch.Role)], ch)
	go func() {
		ch.err = cmd.Wait()
		close(ch.exited)
		if !c.stopping.Load() {
			c.exits <- Exit{Child: ch.Child, Err: ch.err}
		}
	}()
	return nil
}

// startRedis starts a redis-server for each ORAM group with
// redis_server, one per address, and waits until each answers.
func (c *Cluster) startRedis(cfg *cluster.Config, o Options) error {
	started := map[string]bool{}
	for _, g := range cfg.ORAM {
		if !g.RedisServer {
			continue
		}
		addr, err := g.RedisServerAddr()
		if err != nil || started[addr] {
			return err
		}
		started[addr] = true
		if err := c.startRedisAt(cfg, addr, o); err != nil {
			return err
		}
	}
	return nil
}

// startRedisAt starts a redis-server on addr, keeping its append-only
// file and its log in ROOT/redis-PORT.
func (c *Cluster) startRedisAt(cfg *cluster.Config, addr string, o Options) error {
	if conn, err := net.Dial("tcp", addr); err == nil {
		conn.Close()
		return fmt.Errorf("a redis-server for the cluster would listen on %s, where something already does", addr)
	}
	host, port, _ := net.SplitHostPort(addr)
	dir, err := makeDir(filepath.Join(cfg.Root, "redis-"+port))
	if err != nil {
		return err
	}
	bin := o.RedisServer
	if bin == "" {
		bin = "redis-server"
	}
	ch := &child{Child: Child{Name: "redis-" + port, Role: "redis", Listens: "redis " + addr, Log: filepath.Join(dir, "redis.log")}}
	cmd := exec.Command(bin, "--port", port, "--bind", host, "--save", "", "--appendonly", "yes", "--dir", dir, "--logfile", ch.Log)
	if err := c.start(ch, cmd); err != nil {
		return err
	}
	return waitRedis(ch, addr)
}

// waitRedis waits until the redis-server ch on addr answers PING.
func waitRedis(ch *child, addr string) error {
	deadline := time.Now().Add(redisReady)
	for time.Now().Before(deadline) {
		if ping(addr) == nil {
			return nil
		}
		select {
		case <-ch.exited:
			return fmt.Errorf("redis-server on %s exited (%v): see %s", addr, ch.err, ch.Log)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("redis-server on %s did not answer within %v: see %s", addr, redisReady, ch.Log)
}

// ping sends PING to the Redis server on addr and reads its answer.
func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err == nil && line != "+PONG\r\n" {
		err = fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return err
}

// Children lists the children in the order Stop stops them: routers,
// Stash replicas, ORAM replicas, redis-servers, each in the
// configuration's order.
func (c *Cluster) Children() []Child {
	var out []Child
	for _, t := range c.tiers {
		for _, ch := range t {
			out = append(out, ch.Child)
		}
	}
	return out
}

// Exits delivers the children that exit before Stop.
func (c *Cluster) Exits() <-chan Exit { return c.exits }

// Stop stops the children, tier by tier: SIGTERM to each child of the
// tier still running, then SIGKILL to those still running after grace.
// It returns how each ended, in that order.
func (c *Cluster) Stop(grace time.Duration) []Exit {
	c.stopping.Store(true)
	var out []Exit
	for _, t := range c.tiers {
		out = append(out, stopTier(t, grace)...)
	}
	return out
}

// stopTier sends SIGTERM to every child of a tier, and SIGKILL to those
// still running after grace.
func stopTier(t []*child, grace time.Duration) []Exit {
	for _, ch := range t {
		ch.cmd.Process.Signal(syscall.SIGTERM)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	expired := false
	var out []Exit
	for _, ch := range t {
		if !expired {
			select {
			case <-ch.exited:
			case <-timer.C:
				expired = true
			}
		}
		if expired {
			ch.cmd.Process.Kill()
			<-ch.exited
		}
		out = append(out, Exit{Child: ch.Child, Err: ch.err})
	}
	return out
}
