// Package testcerts makes throwaway TLS certificates for tests: a CA, a
// server certificate for 127.0.0.1 and localhost, and a client
// certificate, both signed by the CA, written as PEM files in the test's
// temporary directory. Nothing it makes is committed or outlives the test.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Set is one CA and the certificates it signed.
type Set struct {
	// CA, ServerCert, ServerKey, ClientCert and ClientKey are the paths
	// of the PEM files.
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
	// Pool holds the CA, to verify either certificate.
	Pool *x509.CertPool
	// Server and Client are the certificates with their keys.
	Server, Client tls.Certificate
}

// New makes a CA and a server and a client certificate under t.TempDir().
func New(t testing.TB) *Set {
	t.Helper()
	dir := t.TempDir()
	ca, caKey := newCA(t)
	s := &Set{CA: filepath.Join(dir, "ca.pem"), Pool: x509.NewCertPool()}
	s.Pool.AddCert(ca)
	writePEM(t, s.CA, "CERTIFICATE", ca.Raw)
	s.Server, s.ServerCert, s.ServerKey = issue(t, dir, "server", ca, caKey, x509.ExtKeyUsageServerAuth)
	s.Client, s.ClientCert, s.ClientKey = issue(t, dir, "client", ca, caKey, x509.ExtKeyUsageClientAuth)
	return s
}

// ClientConfig is a client's TLS configuration trusting the CA, with the
// client certificate when withCert.
func (s *Set) ClientConfig(withCert bool) *tls.Config {
	c := &tls.Config{RootCAs: s.Pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if withCert {
		c.Certificates = []tls.Certificate{s.Client}
	}
	return c
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func template(cn string) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	return &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
}

func newCA(t testing.TB) (*x509.Certificate, *ecdsa.PrivateKey) {
	key := newKey(t)
	tmpl := template("oblivkv test CA")
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	return sign(t, tmpl, tmpl, key, key), key
}

func sign(t testing.TB, tmpl, parent *x509.Certificate, pub *ecdsa.PrivateKey, signer *ecdsa.PrivateKey) *x509.Certificate {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &pub.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// issue makes a certificate for 127.0.0.1 and localhost signed by the CA
// and writes it and its key as dir/name.pem and dir/name-key.pem.
func issue(t testing.TB, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, usage x509.ExtKeyUsage) (tls.Certificate, string, string) {
	key := newKey(t)
	tmpl := template("oblivkv test " + name)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
	tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	tmpl.DNSNames = []string{"localhost"}
	cert := sign(t, tmpl, ca, key, caKey)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", cert.Raw)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}, certFile, keyFile
}

func writePEM(t testing.TB, path, kind string, der []byte) {
	data := pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
