package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/oblivkv/oblivkv/cluster"
	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/launch"
)

// upGrace is how long cluster up waits for each tier of its children to
// stop after SIGTERM before it kills them.
const upGrace = 15 * time.Second

func newClusterUpCmd() *cobra.Command {
	var (
		config     string
		plaintext  bool
		profileDir string
	)
	cmd := &cobra.Command{
		Use:   "up --config FILE",
		Short: "Start every process of a cluster on this machine, and stop them all at SIGINT or SIGTERM",
		Long: `Start every process of the configuration on this machine, each a child
running this binary's oblivkv cluster ROLE --config FILE --id ID, its output
appended to ROOT/ID/log. First it writes the certificates and the store's key
if they are missing (as oblivkv cluster certs) and starts a redis-server for
each ORAM shard with redis_server: true, on the port of its storage's URL,
bound to loopback, with an append-only file and its log in ROOT/redis-PORT.
Then it starts the ORAM replicas, the Stash replicas and the routers, and
prints where each listens.

A child that exits on its own is reported on stderr and not restarted. At
SIGINT or SIGTERM it stops the routers, then the Stash replicas, then the
ORAM replicas, then the redis-servers, each tier with SIGTERM and, after
15 seconds, SIGKILL, and exits. --plaintext starts the processes with
--plaintext (a cluster whose every address is on loopback).
--cpuprofile-dir DIR makes each process write a CPU profile of its whole run
to DIR/ID.pprof when it stops (its --cpuprofile), for go tool pprof: where
each process of a loaded cluster spends its CPU.

  oblivkv cluster up --config cluster/example.yaml`,
		Args: cobra.NoArgs,
		RunE: withConfig(&config, func(cmd *cobra.Command, cfg *cluster.Config) error {
			return clusterUp(cmd, cfg, launch.Options{Config: config, Plaintext: plaintext, ProfileDir: profileDir, Grace: upGrace})
		}),
	}
	configFlag(cmd, &config)
	cmd.Flags().BoolVar(&plaintext, "plaintext", false, "no TLS between the cluster's processes (loopback only)")
	cmd.Flags().StringVar(&profileDir, "cpuprofile-dir", "", "each process writes a CPU profile of its run to `DIR`/ID.pprof when it stops")
	return cmd
}

// clusterUp runs the cluster of cfg, read from o.Config, until a signal.
func clusterUp(cmd *cobra.Command, cfg *cluster.Config, o launch.Options) error {
	out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if err := writeCertsAndKey(out, cfg, cfg.Certs, cluster.DefaultNodeValidity, false); err != nil {
		return err
	}
	var err error
	if o.Exe, err = os.Executable(); err != nil {
		return err
	}
	if o.Config, err = filepath.Abs(o.Config); err != nil {
		return err
	}
	if o.ProfileDir != "" {
		if o.ProfileDir, err = filepath.Abs(o.ProfileDir); err != nil {
			return err
		}
		if err := os.MkdirAll(o.ProfileDir, 0o700); err != nil {
			return err
		}
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	c, err := launch.Start(cfg, o)
	if err != nil {
		return err
	}
	printChildren(out, c.Children())
	for {
		select {
		case e := <-c.Exits():
			fmt.Fprintf(errOut, "%s (pid %d) exited: %s; see %s\n", e.Name, e.PID, exitStatus(e.Err), e.Log)
		case sig := <-sigs:
			fmt.Fprintf(errOut, "%s: stopping the cluster\n", sig)
			for _, e := range c.Stop(upGrace) {
				fmt.Fprintf(errOut, "stopped %s (pid %d): %s\n", e.Name, e.PID, exitStatus(e.Err))
			}
			return nil
		}
	}
}

// printChildren says where each child listens and logs.
func printChildren(w io.Writer, children []launch.Child) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tROLE\tPID\tLISTENS\tLOG")
	for _, c := range children {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", c.Name, c.Role, c.PID, c.Listens, c.Log)
	}
	tw.Flush()
	fmt.Fprintln(w, "running; SIGINT or SIGTERM stops them all")
}

// exitStatus says how a child ended.
func exitStatus(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}
