package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/cluster"
	"github.com/oblivkv/oblivkv/cluster/process"
	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/setup"
	"github.com/oblivkv/oblivkv/resp"
)

// processRoles are the roles of a cluster's processes, as the commands
// that start them name them.
var processRoles = []struct{ role, short string }{
	{"router", "Start a router: RESP clients connect to it, and it forwards their requests to the Stash shards"},
	{"stash", "Start a replica of a Stash shard's group"},
	{"oram", "Start a replica of an ORAM shard's group, on the shard's storage"},
}

// clusterProcessFlags are the flags of the commands that start one
// process.
type clusterProcessFlags struct {
	config, id, tap string
	cpuProfile      string
	plaintext, join bool
	serve           serveFlags // a router's RESP listener and who may connect
}

func newClusterProcessCmd(role, short string) *cobra.Command {
	var f clusterProcessFlags
	cmd := &cobra.Command{
		Use:   role + " --config FILE --id ID",
		Short: short,
		Long: short + `.

The process is the one of the configuration whose id is ID; it reads the
store's key file and its certificates (oblivkv cluster certs writes both) and
keeps its state in its data directory, ROOT/ID. It runs until SIGINT or
SIGTERM, or, for a replica, until it is removed from its group (oblivkv
cluster remove-server). The processes call each other over mutual TLS; --plaintext drops
TLS, for a cluster whose every address is on loopback (refused otherwise).
With an http address in the configuration, the process serves /metrics and
/status there (docs/OPERATIONS.md, "A cluster"). oblivkv cluster up starts
every process of a configuration on one machine.

The process reads the configuration file again when it meets a process id it
does not know (a replica added to a group since it started), at most once a
second; a file that changes anything but groups' replicas is refused, logged,
and the configuration in use kept.` + joinHelp(role) + routerHelp(role),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runClusterProcess(cmd.Context(), role, f)
		},
	}
	configFlag(cmd, &f.config)
	cmd.Flags().StringVar(&f.id, "id", "", "the id of this process in the configuration (required)")
	cmd.Flags().BoolVar(&f.plaintext, "plaintext", false, "no TLS between the cluster's processes (loopback only)")
	cmd.Flags().StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the process (from its start to shutdown) to `FILE`, for go tool pprof")
	cmd.MarkFlagRequired("id")
	if role != "router" {
		cmd.Flags().BoolVar(&f.join, "join", false, "wait to be added to the running group (oblivkv cluster add-voter) instead of starting it")
	}
	if role == "oram" {
		cmd.Flags().StringVar(&f.tap, "tap", "", "write what the shard's storage sees of this replica to `FILE` (see oblivkv tap merge)")
	}
	if role == "router" {
		f.serve.sec.register(cmd)
	}
	return cmd
}

func joinHelp(role string) string {
	if role == "router" {
		return ""
	}
	return `

A replica's first start, with no state in its data directory, starts its
group with the configuration's replicas: every replica of a new group does.
A replica added to a group that already runs must instead be started with
--join: it waits until the group's leader adds it (oblivkv cluster
add-voter), and never starts a group of its own. Once it has state, --join
changes nothing.`
}

func routerHelp(role string) string {
	if role != "router" {
		return ""
	}
	return `

A router listens for RESP clients on its configuration's resp address, with
the same AUTH, users file, TLS and protected mode as serve (see serve --help).`
}

// runClusterProcess runs process f.id, which must have the role role,
// until a signal, or until a replica is removed from its group.
func runClusterProcess(ctx context.Context, role string, f clusterProcessFlags) error {
	cfg, err := cluster.Load(f.config)
	if err != nil {
		return err
	}
	n, ok := cfg.Node(f.id)
	switch {
	case !ok:
		return fmt.Errorf("no process %q in %s", f.id, f.config)
	case n.Role != role:
		return fmt.Errorf("process %q is a %s, not a %s: start it with oblivkv cluster %s", f.id, n.Role, role, n.Role)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("process", f.id)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	p, err := process.Start(ctx, cfg, f.id, process.Options{Plaintext: f.plaintext, Storage: openStorage, Log: log, TapFile: f.tap,
		ConfigFile: f.config, Join: f.join})
	if err != nil {
		return err
	}
	stopProfile, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		return errors.Join(err, p.Close())
	}
	defer stopProfile()
	if role == "router" {
		f.serve.listen = n.Addrs[0]
		err = serveRouter(p, f.serve, sigs, log)
	} else {
		log.Info("oblivkv cluster process running", "role", role, "shard", n.Shard)
		select {
		case sig := <-sigs:
			log.Info("shutting down", "signal", sig.String())
		case <-p.Removed():
			log.Info("removed from its group: shutting down")
		}
	}
	return errors.Join(err, p.Close())
}

// openStorage opens an ORAM shard's storage, as serve opens its backend.
func openStorage(ctx context.Context, spec, dataDir string) (backend.Backend, error) {
	return setup.OpenBackend(ctx, spec, dataDir, false)
}

// serveRouter serves the router's store over RESP until a signal.
func serveRouter(p *process.Process, f serveFlags, sigs <-chan os.Signal, log *slog.Logger) error {
	l, err := f.open()
	if err != nil {
		return err
	}
	srv := resp.NewServer(p.Router(), resp.Options{Logger: log, Version: version, Users: l.users})
	log.Info("oblivkv cluster router serving", append([]any{"listen", l.clients.Addr().String()}, l.authAttrs()...)...)
	return serveUntilSignal(srv, l.clients, sigs, log)
}
