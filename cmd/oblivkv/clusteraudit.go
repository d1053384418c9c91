package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/oblivkv/oblivkv/cluster"
	"github.com/oblivkv/oblivkv/cluster/process"
	"github.com/oblivkv/oblivkv/observe"
)

func newClusterAuditCmd() *cobra.Command {
	var config string
	cmd := &cobra.Command{
		Use:   "audit --config FILE TAP...",
		Short: "Check what an ORAM shard's storage saw, from its replicas' tap logs",
		Long: `Merge the tap logs of an ORAM shard's replicas (oblivkv cluster oram --tap FILE,
one per start of each replica) by time, as the shard's storage saw them, and
run treebeard's structural checks of storage's view on them: the calls parse
as multi-path reads and evictions, slots have one size and metadata another,
each tree's evictions go in reverse-lexicographic order and its buckets are
reshuffled exactly after S reads, across every failover (a new leader's fence
claims and its repeats of its predecessor's last Write and Reads are set
aside). It also checks that storage accepted no fenced write below a token it
had accepted. Give the logs of one shard from its first start, while its
trees are idle. Exits 1 when a check fails.

  oblivkv cluster audit --config FILE data/oram-0-a.tap data/oram-0-b.tap data/oram-0-c.tap`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, taps []string) error {
			cfg, err := cluster.Load(config)
			if err != nil {
				return err
			}
			sh, err := process.ShapeOf(cfg)
			if err != nil {
				return err
			}
			records, err := mergedTaps(taps)
			if err != nil {
				return err
			}
			if err := errors.Join(sh.CheckView(records), observe.CheckFenceOrder(records)); err != nil {
				return fmt.Errorf("storage's view fails: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "storage's view passes: %d calls\n", len(records))
			return nil
		},
	}
	configFlag(cmd, &config)
	return cmd
}

// mergedTaps merges tap logs by time.
func mergedTaps(paths []string) ([]observe.Record, error) {
	dir, err := os.MkdirTemp("", "oblivkv-taps")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	merged := filepath.Join(dir, "merged.tap")
	if _, err := observe.Merge(merged, paths...); err != nil {
		return nil, err
	}
	return observe.ReadFile(merged)
}
