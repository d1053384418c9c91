package cluster

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func exampleCerts(t *testing.T) (*Config, string) {
	t.Helper()
	cfg, err := Load("example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	issued, err := WriteCerts(cfg, dir, time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	if !issued.NewCA || len(issued.Nodes) != len(cfg.Nodes())+1 || !slices.Contains(issued.Nodes, AdminID) {
		t.Fatalf("WriteCerts = %+v, want a new CA, every process's certificate and the operator's", issued)
	}
	return cfg, dir
}

// handshake runs a mutual TLS handshake over loopback between a server
// with srv and a client with cli, and returns the client's error.
func handshake(t *testing.T, srv, cli *tls.Config) error {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.(*tls.Conn).Handshake()
		c.Write([]byte{1}) // the client reads it once the server accepted its certificate
		c.Close()
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), cli)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Read(make([]byte, 1))
	return err
}

func tlsConfigs(t *testing.T, dir, server, client, peer string) (*tls.Config, *tls.Config) {
	t.Helper()
	srv, err := ServerTLS(dir, server)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := ClientTLS(dir, client, peer)
	if err != nil {
		t.Fatal(err)
	}
	return srv, cli
}

func TestMutualTLS(t *testing.T) {
	_, dir := exampleCerts(t)
	srv, cli := tlsConfigs(t, dir, "stash-0-a", "router-0", "stash-0-a")
	if err := handshake(t, srv, cli); err != nil {
		t.Fatalf("router-0 calling stash-0-a: %v", err)
	}
	// A process answering for another id is refused by its caller.
	srv, cli = tlsConfigs(t, dir, "stash-0-b", "router-0", "stash-0-a")
	if err := handshake(t, srv, cli); err == nil || !strings.Contains(err.Error(), "stash-0-a") {
		t.Fatalf("stash-0-b answering for stash-0-a: %v, want a certificate name error", err)
	}
}

func TestOtherClusterRefused(t *testing.T) {
	cfg, dir := exampleCerts(t)
	other := t.TempDir()
	if _, err := WriteCerts(cfg, other, time.Hour, false); err != nil {
		t.Fatal(err)
	}
	srv, _ := tlsConfigs(t, dir, "oram-0-a", "router-0", "oram-0-a")
	_, cli := tlsConfigs(t, other, "oram-0-a", "router-0", "oram-0-a")
	if err := handshake(t, srv, cli); err == nil {
		t.Fatal("a process of another cluster's CA was accepted")
	}
	// A caller with no certificate at all is refused by the server.
	noCert := cli.Clone()
	noCert.Certificates = nil
	noCert.RootCAs = srv.ClientCAs
	if err := handshake(t, srv, noCert); err == nil {
		t.Fatal("a caller with no certificate was accepted")
	}
}

func TestWriteCertsKeepsWhatExists(t *testing.T) {
	cfg, dir := exampleCerts(t)
	ca, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	node, _ := os.ReadFile(filepath.Join(dir, "router-0.crt"))
	cfg.Routers = append(cfg.Routers, Router{ID: "router-2", RESP: "10.0.0.7:6391", RPC: "node7.example:7100"})
	issued, err := WriteCerts(cfg, dir, time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	if issued.NewCA || !slices.Equal(issued.Nodes, []string{"router-2"}) || issued.Kept != len(cfg.Nodes()) {
		t.Fatalf("second WriteCerts = %+v, want only router-2's certificate under the same CA", issued)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "ca.crt")); string(got) != string(ca) {
		t.Fatal("the CA was replaced")
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "router-0.crt")); string(got) != string(node) {
		t.Fatal("an existing certificate was replaced without renew")
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "router-2.crt"), filepath.Join(dir, "router-2.key"))
	if err != nil {
		t.Fatal(err)
	}
	leaf := cert.Leaf
	if !slices.Contains(leaf.DNSNames, "node7.example") || !slices.Contains(leaf.DNSNames, "router-2") ||
		len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(net.ParseIP("10.0.0.7")) {
		t.Fatalf("router-2's certificate names %v and %v, want its id, its host name and its IP", leaf.DNSNames, leaf.IPAddresses)
	}
	if fi, err := os.Stat(filepath.Join(dir, "router-2.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("router-2.key: %v, mode %v; want 0600", err, fi.Mode())
	}
	issued, err = WriteCerts(cfg, dir, time.Hour, true)
	if err != nil || len(issued.Nodes) != len(cfg.Nodes())+1 {
		t.Fatalf("renew: %+v, %v; want every process's certificate", issued, err)
	}
}

func TestMissingCertificate(t *testing.T) {
	_, dir := exampleCerts(t)
	if _, err := ServerTLS(dir, "router-9"); err == nil || !strings.Contains(err.Error(), "oblivkv cluster certs") {
		t.Fatalf("ServerTLS of an unknown process = %v, want an error naming the command that writes certificates", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.key"), []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _ := Load("example.yaml")
	if _, err := WriteCerts(cfg, dir, time.Hour, true); err == nil || errors.Is(err, os.ErrNotExist) {
		t.Fatalf("WriteCerts over a damaged CA key = %v, want a refusal (never a new CA)", err)
	}
}
