package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/oblivkv/oblivkv/cluster"
	"github.com/oblivkv/oblivkv/cluster/membership"
)

// membershipFlags are the flags of the commands that ask a group's
// replicas about its members.
type membershipFlags struct {
	config, id string
	plaintext  bool
	timeout    time.Duration
}

// register gives cmd the flags, with idHelp the meaning of --id.
func (f *membershipFlags) register(cmd *cobra.Command, idHelp string, timeout time.Duration) {
	configFlag(cmd, &f.config)
	cmd.Flags().StringVar(&f.id, "id", "", idHelp+" (required)")
	cmd.MarkFlagRequired("id")
	cmd.Flags().BoolVar(&f.plaintext, "plaintext", false, "no TLS: for a cluster started with --plaintext")
	cmd.Flags().DurationVar(&f.timeout, "timeout", timeout, "how long to wait for the group")
}

// run is a RunE that loads the configuration and the operator's side,
// and runs do within the timeout.
func (f *membershipFlags) run(do func(ctx context.Context, w io.Writer, a *membership.Admin) error) func(*cobra.Command, []string) error {
	return withConfig(&f.config, func(cmd *cobra.Command, cfg *cluster.Config) error {
		a, err := membership.NewAdmin(cfg, f.plaintext)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
		defer cancel()
		return do(ctx, cmd.OutOrStdout(), a)
	})
}

const membershipHelp = `
The command calls the group's replicas over the cluster's mutual TLS with
the operator's certificate (admin.crt, admin.key in the certs directory,
which oblivkv cluster certs writes) and seals its request under the store's
key: only a holder of both changes a group.`

func newClusterAddVoterCmd() *cobra.Command {
	var f membershipFlags
	cmd := &cobra.Command{
		Use:   "add-voter --config FILE --id ID",
		Short: "Add a replica to its group, and wait until it has caught up",
		Long: `Ask the leader of replica ID's group to add ID to the group as a voter, then
wait until ID has applied every entry the group had committed when it was
added; fail after --timeout.

First add ID to its group's replicas in the configuration file (every
process's copy), run oblivkv cluster certs (it issues ID's certificate and
keeps the others), and start ID with --join (oblivkv cluster stash|oram
--config FILE --id ID --join), so that it waits to be added instead of
starting a group of its own. The leader checks that its own copy of the
file names ID with the same raft address. docs/OPERATIONS.md, "Adding and
removing a replica", has the whole procedure.` + membershipHelp + `

  oblivkv cluster add-voter --config cluster/example.yaml --id stash-0-d`,
		Args: cobra.NoArgs,
		RunE: f.change((*membership.Admin).Add, "added to", "already a member of"),
	}
	f.register(cmd, "the replica to add, as the configuration names it", time.Minute)
	return cmd
}

func newClusterRemoveServerCmd() *cobra.Command {
	var f membershipFlags
	cmd := &cobra.Command{
		Use:   "remove-server --config FILE --id ID",
		Short: "Remove a replica from its group",
		Long: `Ask the leader of replica ID's group to remove ID from the group. ID may be the
leader itself: it steps down once the change is committed, and the others
elect a leader among themselves. A group is never left empty: removing its
last replica is refused.

ID stops on its own once it sees the change, or once this command, after
the change, tells it so (one that was down then does not: stop it). Then
delete it from the configuration file (every process's copy). A group of 2
survives no failure: a majority of 2 is both.` + membershipHelp + `

  oblivkv cluster remove-server --config cluster/example.yaml --id stash-0-a`,
		Args: cobra.NoArgs,
		RunE: f.change((*membership.Admin).Remove, "removed from", "already not a member of"),
	}
	f.register(cmd, "the replica to remove", 30*time.Second)
	return cmd
}

// change is a RunE that asks the group of replica --id for change of
// it, and says what it did: changed or unchanged.
func (f *membershipFlags) change(change func(*membership.Admin, context.Context, string) (membership.Reply, error), changed, unchanged string) func(*cobra.Command, []string) error {
	return f.run(func(ctx context.Context, w io.Writer, a *membership.Admin) error {
		reply, err := change(a, ctx, f.id)
		if err != nil {
			return err
		}
		return reportChange(w, f.id, changed, unchanged, reply)
	})
}

// reportChange says what an add or a remove of id did.
func reportChange(w io.Writer, id, changed, unchanged string, reply membership.Reply) error {
	what := changed
	if !reply.Changed {
		what = unchanged
	}
	var ids []string
	for _, m := range reply.Members {
		ids = append(ids, m.ID)
	}
	_, err := fmt.Fprintf(w, "%s %s its group; members: %v (leader: %s)\n", id, what, ids, orNone(reply.Leader))
	return err
}

func newClusterMembersCmd() *cobra.Command {
	var (
		f      membershipFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "members --config FILE --id ID",
		Short: "List the members of a replica's group, as raft's configuration has them",
		Long: `Ask the group of replica ID for its members, as its leader's raft configuration
has them (which a replica added or removed changes before the configuration
file does), and each member for its state, term, and commit and applied
indexes. A member that does not answer is shown down.

--json prints {"leader": ID, "members": [{"id", "raft", "state", "term",
"commit_index", "applied_index", "up", "error"}]}.` + membershipHelp + `

  oblivkv cluster members --config cluster/example.yaml --id stash-0-a`,
		Args: cobra.NoArgs,
		RunE: f.run(func(ctx context.Context, w io.Writer, a *membership.Admin) error {
			leader, members, err := a.Members(ctx, f.id)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(w).Encode(membersReport{Leader: leader, Members: members})
			}
			return printMembers(w, leader, members)
		}),
	}
	f.register(cmd, "a replica of the group", 10*time.Second)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// membersReport is what cluster members --json prints.
type membersReport struct {
	Leader  string              `json:"leader"`
	Members []membership.Member `json:"members"`
}

// printMembers writes the members as a table.
func printMembers(w io.Writer, leader string, members []membership.Member) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "leader %s\n  MEMBER\tRAFT\tSTATE\tTERM\tCOMMIT\tAPPLIED\n", orNone(leader))
	for _, m := range members {
		if !m.Up {
			fmt.Fprintf(tw, "  %s\t%s\tdown: %s\n", m.ID, m.Raft, m.Error)
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%d\t%d\n", m.ID, m.Raft, m.State.State, m.Term, m.CommitIndex, m.AppliedIndex)
	}
	return tw.Flush()
}
