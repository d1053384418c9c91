package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/oblivkv/oblivkv/cluster"
	"github.com/oblivkv/oblivkv/cluster/process"
)

func newClusterStatusCmd() *cobra.Command {
	var (
		config  string
		asJSON  bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status --config FILE",
		Short: "Show which of a cluster's processes are up, and each group's leader, term and indexes",
		Long: `Ask every process of the configuration for its /status, on its http address,
and print one table per group: its members, which replica leads, and each
replica's raft state, term, commit and applied indexes and last snapshot,
with the stash size of a Stash shard's leader and the storage of an ORAM
shard's replicas; then the routers. A process that does not answer within
--timeout, or has no http address, is shown down.

--json prints the same as one JSON object: routers, stash and oram, each
group with its shard, leader and replicas, each process with its /status
fields (docs/OPERATIONS.md, "A cluster"), up, and why it is down.

  oblivkv cluster status --config cluster/example.yaml`,
		Args: cobra.NoArgs,
		RunE: withConfig(&config, func(cmd *cobra.Command, cfg *cluster.Config) error {
			r := queryCluster(cmd.Context(), cfg, timeout)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			return r.print(cmd.OutOrStdout())
		}),
	}
	configFlag(cmd, &config)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Second, "how long to wait for each process")
	return cmd
}

// processReport is one process as cluster status shows it.
type processReport struct {
	process.Status
	Up    bool   `json:"up"`
	Error string `json:"error,omitempty"` // why it is shown down
}

// groupReport is one shard's group.
type groupReport struct {
	Shard int `json:"shard"`
	// Leader is the replica that says it leads, in the highest term if
	// several do; "" if none does.
	Leader   string          `json:"leader"`
	Replicas []processReport `json:"replicas"`
}

// clusterReport is what cluster status shows.
type clusterReport struct {
	Routers []processReport `json:"routers"`
	Stash   []groupReport   `json:"stash"`
	ORAM    []groupReport   `json:"oram"`
}

// queryCluster asks every process of cfg for its status at once, waiting
// at most timeout for each.
func queryCluster(ctx context.Context, cfg *cluster.Config, timeout time.Duration) clusterReport {
	byID := map[string]processReport{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range cfg.Nodes() {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			r := queryProcess(ctx, n)
			mu.Lock()
			byID[n.ID] = r
			mu.Unlock()
		})
	}
	wg.Wait()
	var r clusterReport
	for _, router := range cfg.Routers {
		r.Routers = append(r.Routers, byID[router.ID])
	}
	r.Stash = groupReports(cfg.Stash, byID)
	r.ORAM = groupReports(cfg.ORAM, byID)
	return r
}

// queryProcess asks process n for its status.
func queryProcess(ctx context.Context, n cluster.Node) processReport {
	r := processReport{Status: process.Status{ID: n.ID, Role: n.Role, Shard: n.Shard}}
	st, err := fetchStatus(ctx, n)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.Status, r.Up = st, true
	return r
}

// errNoHTTP is why a process without an http address is not asked.
var errNoHTTP = errors.New("no http address in the configuration")

// fetchStatus gets n's /status.
func fetchStatus(ctx context.Context, n cluster.Node) (process.Status, error) {
	var st process.Status
	if n.HTTP == "" {
		return st, errNoHTTP
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.HTTP+"/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("/status: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("/status: %w", err)
	}
	if st.ID != n.ID {
		return st, fmt.Errorf("%s answers as process %q", n.HTTP, st.ID)
	}
	return st, nil
}

// groupReports gathers the reports of each group's replicas.
func groupReports(groups []cluster.Group, byID map[string]processReport) []groupReport {
	var out []groupReport
	for i, g := range groups {
		gr := groupReport{Shard: i}
		var term uint64
		for _, rep := range g.Replicas {
			r := byID[rep.ID]
			gr.Replicas = append(gr.Replicas, r)
			if r.Up && r.State == "Leader" && (gr.Leader == "" || r.Term > term) {
				gr.Leader, term = r.ID, r.Term
			}
		}
		out = append(out, gr)
	}
	return out
}

// print writes the report as tables.
func (r clusterReport) print(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, g := range r.Stash {
		g.print(tw, "stash", "STASH", func(p processReport) string { return optional(p.StashSize) })
	}
	for _, g := range r.ORAM {
		g.print(tw, "oram", "STORAGE", func(p processReport) string { return p.Storage })
	}
	fmt.Fprintln(tw, "routers\n  ID\tSTATE")
	for _, p := range r.Routers {
		state := "up"
		if !p.Up {
			state = down(p)
		}
		fmt.Fprintf(tw, "  %s\t%s\n", p.ID, state)
	}
	return tw.Flush()
}

// print writes a group's table, with a last column of each replica's
// layer's own.
func (g groupReport) print(w io.Writer, layer, column string, value func(processReport) string) {
	fmt.Fprintf(w, "%s %d: leader %s, members %s\n", layer, g.Shard, orNone(g.Leader), strings.Join(g.members(), ","))
	fmt.Fprintf(w, "  REPLICA\tSTATE\tTERM\tCOMMIT\tAPPLIED\tSNAPSHOT\t%s\n", column)
	for _, p := range g.Replicas {
		if !p.Up {
			fmt.Fprintf(w, "  %s\t%s\n", p.ID, down(p))
			continue
		}
		fmt.Fprintf(w, "  %s\t%s\t%d\t%d\t%d\t%d\t%s\n", p.ID, p.State, p.Term, p.CommitIndex, p.AppliedIndex, p.LastSnapshot, value(p))
	}
	fmt.Fprintln(w)
}

// members are the group's members as its leader's raft configuration
// says, or else its replicas in the configuration file.
func (g groupReport) members() []string {
	var ids []string
	for _, p := range g.Replicas {
		if p.ID == g.Leader {
			return p.Members
		}
		ids = append(ids, p.ID)
	}
	return ids
}

// down says of a process that did not answer whether it was asked.
func down(p processReport) string {
	if p.Error == errNoHTTP.Error() {
		return "unknown (no http address)"
	}
	return "down"
}

func optional(n *int) string {
	if n == nil {
		return "-"
	}
	return fmt.Sprint(*n)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
