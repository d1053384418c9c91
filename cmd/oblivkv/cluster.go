package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/oblivkv/oblivkv/cluster"
)

func newClusterCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Run a treebeard cluster: its certificates, its processes, their status",
		Long: `A treebeard cluster is described by one YAML file: its routers, its Stash
shards and its ORAM shards, each shard a group of replicas, where each process
listens (and, optionally, serves /metrics and /status over http) and which
storage each ORAM shard owns (cluster/example.yaml is a whole one on
loopback; docs/OPERATIONS.md, "A cluster", explains every field).

certs writes the certificates its processes call each other with and the
store's key; up starts every process of the file on this machine (and a
redis-server for each ORAM shard with redis_server: true) and stops them at
SIGINT or SIGTERM; router, stash and oram start one process each; status
shows which processes are up, and each group's leader, term and indexes;
audit checks what an ORAM shard's storage saw, from its replicas' taps;
add-voter and remove-server add a replica to a running group and remove one,
and members lists a group's members as raft has them.`,
	}
	cmd.AddCommand(newClusterCertsCmd(), newClusterUpCmd(), newClusterStatusCmd(), newClusterAuditCmd(),
		newClusterAddVoterCmd(), newClusterRemoveServerCmd(), newClusterMembersCmd())
	for _, r := range processRoles {
		cmd.AddCommand(newClusterProcessCmd(r.role, r.short))
	}
	return cmd
}

func newClusterCertsCmd() *cobra.Command {
	var (
		config string
		out    string
		days   int
		renew  bool
	)
	cmd := &cobra.Command{
		Use:   "certs --config FILE",
		Short: "Write the cluster's CA, a certificate for each of its processes, and the store's key",
		Long: `Write the cluster's certificate authority and, signed by it, a certificate and
key for every process of the configuration, into the configuration's certs
directory (or --out). The processes call each other over mutual TLS with
them: each checks that its peer's certificate comes from this CA and names
the process it meant to reach.

It also writes the store's master key (the configuration's key, default
ROOT/key) when there is none: every process reads it.

A CA already in the directory signs the new certificates; it is never
replaced. Processes that already have a certificate keep it, unless
--renew. It also writes the operator's certificate, admin.crt and admin.key,
which oblivkv cluster add-voter, remove-server and members call with (no
process may be named admin). Adding a process to the configuration and running certs again
gives it a certificate the running processes trust. Keys are written 0600;
copy each process's ID.crt, ID.key and ca.crt to its machine, never ca.key.

  oblivkv cluster certs --config cluster/example.yaml`,
		Args: cobra.NoArgs,
		RunE: withConfig(&config, func(cmd *cobra.Command, cfg *cluster.Config) error {
			if out == "" {
				out = cfg.Certs
			}
			if days <= 0 {
				return fmt.Errorf("--days must be positive, not %d", days)
			}
			return writeCertsAndKey(cmd.OutOrStdout(), cfg, out, time.Duration(days)*24*time.Hour, renew)
		}),
	}
	configFlag(cmd, &config)
	cmd.Flags().StringVar(&out, "out", "", "directory to write into (default: the configuration's certs directory)")
	cmd.Flags().IntVar(&days, "days", int(cluster.DefaultNodeValidity/(24*time.Hour)), "how long the processes' certificates are valid")
	cmd.Flags().BoolVar(&renew, "renew", false, "write a new certificate for every process, not only for those without one")
	return cmd
}

// configFlag gives cmd the required flag --config, the cluster's
// configuration file.
func configFlag(cmd *cobra.Command, config *string) {
	cmd.Flags().StringVar(config, "config", "", "the cluster's configuration file (required)")
	cmd.MarkFlagRequired("config")
}

// withConfig is a command's RunE that loads the configuration file
// *config and runs run with it.
func withConfig(config *string, run func(*cobra.Command, *cluster.Config) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		cfg, err := cluster.Load(*config)
		if err != nil {
			return err
		}
		return run(cmd, cfg)
	}
}

// writeCertsAndKey writes into dir the certificates of cfg's processes
// that have none (every one's if renew), and the store's key if missing,
// and says what it wrote on w.
func writeCertsAndKey(w io.Writer, cfg *cluster.Config, dir string, validity time.Duration, renew bool) error {
	issued, err := cluster.WriteCerts(cfg, dir, validity, renew)
	if err != nil {
		return err
	}
	wrote, err := cluster.EnsureKey(cfg)
	if err != nil {
		return err
	}
	if wrote {
		fmt.Fprintf(w, "wrote the store's key: %s (0600; every process reads it)\n", cfg.Key)
	}
	reportIssued(w, dir, issued)
	return nil
}

// reportIssued says what certs wrote.
func reportIssued(w io.Writer, dir string, issued cluster.Issued) {
	if issued.NewCA {
		fmt.Fprintf(w, "wrote a new CA: %s/ca.crt (keep ca.key off the cluster's machines)\n", dir)
	} else {
		fmt.Fprintf(w, "signed with the CA in %s\n", dir)
	}
	fmt.Fprintf(w, "wrote %d certificates, kept %d\n", len(issued.Nodes), issued.Kept)
	for _, id := range issued.Nodes {
		fmt.Fprintf(w, "  %s/%s.crt\n", dir, id)
	}
}
