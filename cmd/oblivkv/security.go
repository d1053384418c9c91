package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/spf13/cobra"

	"github.com/oblivkv/oblivkv/auth"
)

// passwordEnv is the environment variable that sets the default user's
// password when --requirepass is not given (an argument is visible to
// every user of the machine in ps; the environment is not).
const passwordEnv = "OBLIVKV_PASSWORD"

// securityFlags are serve's flags for who may connect and how.
type securityFlags struct {
	requirePass   string
	usersFile     string
	tlsCert       string
	tlsKey        string
	tlsCA         string
	protectedMode bool
}

func (f *securityFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.requirePass, "requirepass", "", "password of the default user, which clients give with AUTH `PASSWORD` (default: $"+passwordEnv+"; an argument shows in ps, the environment does not)")
	fs.StringVar(&f.usersFile, "users", "", "users `FILE`: one 'NAME read-write|read-only HASH' per line, the hash from 'oblivkv passwd'")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "serve clients over TLS with this certificate `FILE` (PEM; with --tls-key)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "private key `FILE` of --tls-cert (PEM)")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "require client certificates signed by a CA of this `FILE` (PEM)")
	fs.BoolVar(&f.protectedMode, "protected-mode", true, "refuse to listen on a non-loopback address with no password, users file or --tls-ca")
}

// users returns who may connect, or nil when anyone may: the users file's
// users and the default user of --requirepass (or $OBLIVKV_PASSWORD).
func (f *securityFlags) users() (*auth.Users, error) {
	pass := f.requirePass
	if pass == "" {
		pass = os.Getenv(passwordEnv)
	}
	if pass == "" && f.usersFile == "" {
		return nil, nil
	}
	users := auth.NewUsers()
	if f.usersFile != "" {
		var err error
		if users, err = auth.LoadFile(f.usersFile); err != nil {
			return nil, err
		}
	}
	if pass != "" {
		if err := users.AddPassword(auth.DefaultUser, auth.ReadWrite, pass); err != nil {
			return nil, fmt.Errorf("--requirepass or $%s: %w (the users file defines it too?)", passwordEnv, err)
		}
	}
	return users, nil
}

// tlsConfig returns the clients' TLS configuration, or nil without
// --tls-cert. With --tls-ca every client must present a certificate that
// a CA of that file signed.
func (f *securityFlags) tlsConfig() (*tls.Config, error) {
	switch {
	case f.tlsCert == "" && f.tlsKey == "" && f.tlsCA == "":
		return nil, nil
	case f.tlsCert == "" || f.tlsKey == "":
		return nil, errors.New("TLS needs both --tls-cert and --tls-key")
	}
	cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert and --tls-key: %w", err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if f.tlsCA != "" {
		if conf.ClientCAs, err = loadCAs(f.tlsCA); err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		conf.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return conf, nil
}

// loadCAs reads a PEM file of CA certificates.
func loadCAs(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("no PEM certificate in %s", path)
	}
	return pool, nil
}

// checkProtected is protected mode, as Redis has it: a server that anyone
// who reaches it could use (no password, no users, no client
// certificates) may listen only on a loopback address.
func (f *securityFlags) checkProtected(addr net.Addr, users *auth.Users) error {
	if !f.protectedMode || users != nil || f.tlsCA != "" || isLoopback(addr) {
		return nil
	}
	return fmt.Errorf(`refusing to serve %s (protected mode): it is not a loopback address and no
authentication is configured, so anyone who can reach it could read and write
the store. Do one of:
  - set a password: --requirepass PASSWORD, or $%s in the environment;
  - give a users file: --users FILE (lines from 'oblivkv passwd');
  - require client certificates: --tls-cert FILE --tls-key FILE --tls-ca FILE;
  - listen on loopback only: --listen 127.0.0.1:PORT;
  - or, if every client that can reach this address may use the store,
    pass --protected-mode=false`, addr, passwordEnv)
}

func isLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
