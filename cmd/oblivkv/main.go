// Command oblivkv is the oblivious key-value store: a Redis-compatible
// server (serve), a bulk loader (load), a benchmark harness (bench), a
// reader for adversary-view logs (tap), an obliviousness audit (audit), a
// description of an existing store (info), its backups (backup,
// restore), a re-keying of a stopped store under a new master key
// (rekey), the protocols and their options (options), a users file line
// maker (passwd), a treebeard cluster's configuration check and
// certificates (cluster) and version information.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	_ "github.com/oblivkv/oblivkv/protocol/all"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "oblivkv:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "oblivkv",
		Short: "An oblivious key-value store: encrypted data and hidden access patterns on untrusted storage",
		Long: `oblivkv is a trusted proxy that applications talk to as they would to Redis.
It keeps their data encrypted on untrusted storage (an embedded on-disk store,
memory, or a Redis server) and shapes every storage access so the storage
operator cannot tell which keys are used, how often or in what order.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServeCmd(), newLoadCmd(), newDumpCmd(), newBenchCmd(), newTapCmd(), newAuditCmd(), newSimCmd(), newInfoCmd(), newBackupCmd(), newRestoreCmd(), newRekeyCmd(), newOptionsCmd(), newPasswdCmd(), newClusterCmd(), newVersionCmd())
	return root
}
