package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/auditrun"
	"github.com/oblivkv/oblivkv/kv/options"
)

// errAuditFailed is returned when a check fails: the command exits 1
// after writing its outputs.
var errAuditFailed = errors.New("audit failed")

func newAuditCmd() *cobra.Command {
	var cfg auditrun.Config
	var jsonPath, reportDir string
	var opts []string
	cmd := &cobra.Command{
		Use:   "audit --protocol P",
		Short: "Run a protocol on fixed workloads and judge what storage saw",
		Long: `Run a protocol over a tapped in-memory storage on each workload (zipf: Zipf
0.99; uniform; hotkey: one key) and every analysis that applies to what
storage saw: a frequency-analysis attacker that knows the key popularity
ranking, scored against chance; each workload against uniform on every
observable (two-sample chi-square tests); and the protocol's own structural
checks (every oblivious protocol). A protocol that paces itself by a clock
(treebeard's epochs, cloak's batches) runs on one the audit drives, so
storage's view does not depend on how loaded the machine is.
docs/testing.md says what each check means. Prints a summary, writes JSON
(--json) and an HTML report with SVG plots (--report), and exits 1 when a
check fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.Options, err = options.Parse(cfg.Protocol, opts); err != nil {
				return err
			}
			res, err := auditrun.Audit(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), res)
			if err := writeAuditOutputs(res, jsonPath, reportDir); err != nil {
				return err
			}
			if !res.Pass() {
				return fmt.Errorf("%w: %d of %d checks failed", errAuditFailed, len(res.Failed()), len(res.Checks))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Protocol, "protocol", "", "protocol to audit (required)")
	f.StringSliceVar(&cfg.Workloads, "workloads", auditrun.DefaultWorkloads, "workloads to run, of zipf, uniform, hotkey, missing (a key never loaded) and bursts (a round of requests for one key, another every round)")
	f.IntVar(&cfg.Records, "records", 1024, "keys loaded (also the store's capacity)")
	f.IntVar(&cfg.Ops, "ops", 0, "requests per workload (0: the protocol's default, 40000 for the insecure baselines, 3000 unless the protocol registers another)")
	f.IntVar(&cfg.Clients, "clients", 8, "concurrent clients (for a protocol whose clock the audit drives: requests per round)")
	f.DurationVar(&cfg.Timeout, "timeout", auditrun.DefaultTimeout, "bound on each workload's requests: a run still waiting then is cut off and fails")
	f.Uint64Var(&cfg.Seed, "seed", 1, "seed of the workloads")
	f.StringVar(&jsonPath, "json", "", "write the result as JSON to this file")
	f.StringVar(&reportDir, "report", "", "write an HTML report with SVG plots to this directory")
	registerOpt(cmd, &opts, "")
	cmd.MarkFlagRequired("protocol")
	return cmd
}

func writeAuditOutputs(res *auditrun.Result, jsonPath, reportDir string) error {
	if jsonPath != "" {
		f, err := os.Create(jsonPath)
		if err != nil {
			return err
		}
		err = res.WriteJSON(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	if reportDir != "" {
		if _, err := res.WriteReport(reportDir); err != nil {
			return err
		}
	}
	return nil
}
