package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/oblivkv/oblivkv/auth"
)

func newPasswdCmd() *cobra.Command {
	var readOnly bool
	cmd := &cobra.Command{
		Use:   "passwd NAME",
		Short: "Print a users file line for a user, reading the password from stdin",
		Long: `Print the users file line (for serve --users FILE) of user NAME: its name,
its permission (read-write, or read-only with --read-only) and the argon2id
hash of its password. The password is read from stdin: the first line of a
pipe, or typed twice without echo on a terminal. It is never printed.

  oblivkv passwd alice >> users
  printf '%s\n' "$PASSWORD" | oblivkv passwd --read-only reports >> users`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			password, err := readPassword(cmd.InOrStdin(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			line, err := passwdLine(args[0], readOnly, password)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), line)
			return nil
		},
	}
	cmd.Flags().BoolVar(&readOnly, "read-only", false, "the user may only run commands that do not change the store")
	return cmd
}

// passwdLine checks the name (through auth's own rules) and hashes the
// password.
func passwdLine(name string, readOnly bool, password []byte) (string, error) {
	perm := auth.ReadWrite
	if readOnly {
		perm = auth.ReadOnly
	}
	hash, err := auth.Hash(password)
	if err != nil {
		return "", err
	}
	line := auth.FormatLine(name, perm, hash)
	if _, err := auth.Parse(strings.NewReader(line)); err != nil {
		return "", err
	}
	return line, nil
}

// readPassword reads the password: typed twice without echo when in is a
// terminal, otherwise the first line of in.
func readPassword(in io.Reader, prompt io.Writer) ([]byte, error) {
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return typePassword(int(f.Fd()), prompt)
	}
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	password := strings.TrimRight(line, "\r\n")
	if password == "" {
		return nil, errors.New("no password on stdin (its first line is the password)")
	}
	return []byte(password), nil
}

func typePassword(fd int, prompt io.Writer) ([]byte, error) {
	fmt.Fprint(prompt, "Password: ")
	first, err := term.ReadPassword(fd)
	fmt.Fprintln(prompt)
	if err != nil {
		return nil, err
	}
	fmt.Fprint(prompt, "Again: ")
	second, err := term.ReadPassword(fd)
	fmt.Fprintln(prompt)
	switch {
	case err != nil:
		return nil, err
	case len(first) == 0:
		return nil, errors.New("empty password")
	case string(first) != string(second):
		return nil, errors.New("the passwords differ")
	}
	return first, nil
}
