package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/options"
)

func newOptionsCmd() *cobra.Command {
	var protocol string
	cmd := &cobra.Command{
		Use:   "options",
		Short: "List the protocols and the options --opt sets, with their types, defaults and meanings",
		Long: `List every protocol (or the one named by --protocol) with a one-line summary,
and each option --opt NAME=VALUE sets for it: its name, the values it takes
(integer, number or duration), its default and what it does. A default that
depends on the store is given as a formula of its capacity N. An option given
at a default that is a plain value is the same as leaving it out.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			protocols := kv.Protocols()
			if protocol != "" {
				if _, ok := kv.Lookup(protocol); !ok {
					return fmt.Errorf("%w %q (known: %v)", kv.ErrUnknownProtocol, protocol, protocols)
				}
				protocols = []string{protocol}
			}
			return printOptions(cmd.OutOrStdout(), protocols)
		},
	}
	cmd.Flags().StringVar(&protocol, "protocol", "", "list only this protocol")
	return cmd
}

// printOptions writes each protocol's summary and a table of its options.
func printOptions(w io.Writer, protocols []string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i, name := range protocols {
		p, _ := kv.Lookup(name)
		if i > 0 {
			fmt.Fprintln(tw)
		}
		fmt.Fprintf(tw, "%s: %s\n", name, p.Summary)
		list := options.List(name)
		if len(list) == 0 {
			fmt.Fprintln(tw, "  no options")
			continue
		}
		fmt.Fprintln(tw, "  OPTION\tTYPE\tDEFAULT\tMEANING")
		for _, o := range list {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", o.Name, o.Type, o.Default, o.Doc)
		}
	}
	return tw.Flush()
}
