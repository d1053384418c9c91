package main

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/observe"
)

func newTapCmd() *cobra.Command {
	var summary bool
	var limit, top int
	cmd := &cobra.Command{
		Use:   "tap FILE",
		Short: "Print an adversary-view log written by serve --tap",
		Long: `Print an adversary-view log: what the storage operator saw, one line per
backend call (sequence number, time, duration, operation, addresses, bytes,
and for a fenced write its fence's address and token).
With --summary, print totals and the most frequently read addresses instead:
the view a frequency-analysis attacker starts from.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			records, err := observe.ReadFile(args[0])
			if err != nil {
				return err
			}
			if summary {
				return printSummary(cmd.OutOrStdout(), records, top)
			}
			return printRecords(cmd.OutOrStdout(), records, limit)
		},
	}
	cmd.Flags().BoolVar(&summary, "summary", false, "print totals and the most read addresses")
	cmd.Flags().IntVar(&limit, "limit", 0, "print at most this many records (0: all)")
	cmd.Flags().IntVar(&top, "top", 10, "with --summary: how many addresses to list")
	cmd.AddCommand(newTapMergeCmd())
	return cmd
}

func newTapMergeCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "merge --out FILE LOG...",
		Short: "Merge adversary-view logs of several processes into one, by time",
		Long: `Merge the adversary-view logs of several processes that share storage (the
shards of a cluster, or the old and the new leader of one group) into one log
ordered by each call's wall-clock start, numbered again from 1, which tap and
audit read like any other. Each log records the wall-clock time its calls'
start times count from; logs of earlier versions do not, and are refused.
The processes' clocks should agree (NTP): a call's place in the merged log is
only as right as its machine's clock.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := observe.Merge(out, args...)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "merged %d records of %d logs into %s\n", n, len(args), out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "the merged log to write (required)")
	cmd.MarkFlagRequired("out")
	return cmd
}

func printRecords(w io.Writer, records []observe.Record, limit int) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tSTART\tTOOK\tOP\tADDRS\tBYTES\tFIRST ADDR\tFENCE")
	for i, r := range records {
		if limit > 0 && i >= limit {
			break
		}
		first, fence := "", ""
		if len(r.Addrs) > 0 {
			first = strconv.Quote(r.Addrs[0])
		}
		if r.Fence != "" {
			fence = fmt.Sprintf("%s token %d", strconv.Quote(r.Fence), r.Token)
		}
		fmt.Fprintf(tw, "%d\t%v\t%v\t%v\t%d\t%d\t%s\t%s\n", r.Seq, r.Start, r.Took, r.Op, len(r.Addrs), sum(r.Sizes), first, fence)
	}
	return tw.Flush()
}

func printSummary(w io.Writer, records []observe.Record, top int) error {
	perOp := map[observe.Op][3]int{}
	for _, r := range records {
		c := perOp[r.Op]
		c[0]++
		c[1] += len(r.Addrs)
		c[2] += sum(r.Sizes)
		perOp[r.Op] = c
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "OP\tCALLS\tADDRS\tBYTES")
	for _, op := range []observe.Op{observe.OpRead, observe.OpWrite, observe.OpDelete, observe.OpScan} {
		c := perOp[op]
		fmt.Fprintf(tw, "%v\t%d\t%d\t%d\n", op, c[0], c[1], c[2])
	}
	ranked := audit.RankAddresses(records, observe.OpRead)
	reads := perOp[observe.OpRead][1]
	fmt.Fprintln(tw, "\nMOST READ ADDRESS\tREADS\tSHARE")
	for i, ac := range ranked {
		if i >= top {
			break
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f%%\n", strconv.Quote(ac.Addr), ac.Count, 100*float64(ac.Count)/float64(max(reads, 1)))
	}
	return tw.Flush()
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}
