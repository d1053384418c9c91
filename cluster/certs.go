package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/oblivkv/oblivkv/internal/atomicfile"
)

// The cluster's certificates, in one directory:
//
//	ca.crt, ca.key      the cluster's certificate authority
//	ID.crt, ID.key      each process's certificate, signed by the CA
//	admin.crt, admin.key the operator's (AdminID), for the commands that
//	                    change a group's membership
//
// Keys are ECDSA P-256, written 0600. A process's certificate names its
// id (the common name and a DNS name) and every host it listens on; a
// caller checks a peer against the id it dials (ClientTLS), so an address
// taken over by another process of the same cluster is refused too.

// Certificate validity defaults.
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultNodeValidity = 365 * 24 * time.Hour
)

const (
	caName  = "ca"
	certExt = ".crt"
	keyExt  = ".key"
)

// Issued says what WriteCerts did.
type Issued struct {
	NewCA bool     // the CA was created (else the one in the directory signed)
	Nodes []string // ids that got a certificate; the others kept theirs
	Kept  int      // how many certificates were kept
}

// WriteCerts makes the cluster's CA in dir, or uses the one there, and a
// certificate for every process of cfg and for the operator (AdminID)
// that has none (renew: for every one), valid for nodeValidity from now.
// It never replaces a CA: a new one would leave every running process
// unable to trust the others.
func WriteCerts(cfg *Config, dir string, nodeValidity time.Duration, renew bool) (Issued, error) {
	var out Issued
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return out, fmt.Errorf("cluster certs: %w", err)
	}
	ca, caKey, err := loadCA(dir)
	if errors.Is(err, fs.ErrNotExist) {
		ca, caKey, err = newCA(dir)
		out.NewCA = true
	}
	if err != nil {
		return out, err
	}
	for _, n := range append(cfg.Nodes(), Node{ID: AdminID}) {
		if _, err := os.Stat(filepath.Join(dir, n.ID+certExt)); err == nil && !renew {
			out.Kept++
			continue
		}
		if err := issue(dir, n, ca, caKey, nodeValidity); err != nil {
			return out, err
		}
		out.Nodes = append(out.Nodes, n.ID)
	}
	return out, nil
}

// newCA writes a new CA into dir.
func newCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl, err := template("oblivkv cluster CA", DefaultCAValidity)
	if err != nil {
		return nil, nil, err
	}
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster certs: CA: %w", err)
	}
	if err := writePair(dir, caName, der, key); err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(der)
	return ca, key, err
}

// issue writes node n's certificate and key into dir.
func issue(dir string, n Node, ca *x509.Certificate, caKey *ecdsa.PrivateKey, validity time.Duration) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl, err := template(n.ID, validity)
	if err != nil {
		return err
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	tmpl.DNSNames = []string{n.ID}
	for _, host := range n.hosts() {
		if ip := net.ParseIP(host); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, host)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("cluster certs: %s: %w", n.ID, err)
	}
	return writePair(dir, n.ID, der, key)
}

// hosts returns the distinct hosts of n's addresses.
func (n Node) hosts() []string {
	var hosts []string
	seen := map[string]bool{}
	for _, a := range n.Addrs {
		host, _, err := net.SplitHostPort(a)
		if err != nil || host == "" || seen[host] {
			continue
		}
		seen[host] = true
		hosts = append(hosts, host)
	}
	return hosts
}

// template returns a certificate template for name, valid from a minute
// ago (clocks of a cluster's machines differ a little) for validity.
func template(name string, validity time.Duration) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name, Organization: []string{"oblivkv cluster"}},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(validity),
	}, nil
}

// writePair writes name.crt (0644) and name.key (0600) into dir; the key
// first, so a certificate on disk always has its key.
func writePair(dir, name string, der []byte, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, name+keyExt), "EC PRIVATE KEY", keyDER, 0o600); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, name+certExt), "CERTIFICATE", der, 0o644)
}

// writePEM writes one PEM block to path, whole or not at all
// (atomicfile).
func writePEM(path, kind string, der []byte, mode os.FileMode) error {
	if err := atomicfile.Write(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), mode); err != nil {
		return fmt.Errorf("cluster certs: %w", err)
	}
	return nil
}

// loadCA reads dir's CA certificate and key.
func loadCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, caName+certExt), filepath.Join(dir, caName+keyExt))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("cluster certs: the CA in %s: %w", dir, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("cluster certs: the CA key in %s is a %T, want ECDSA", dir, pair.PrivateKey)
	}
	ca, err := x509.ParseCertificate(pair.Certificate[0])
	return ca, key, err
}

// ServerTLS is the TLS configuration of process id's listeners: its own
// certificate, and a client certificate signed by the cluster's CA
// required of every caller (mutual TLS), TLS 1.3 only.
func ServerTLS(dir, id string) (*tls.Config, error) {
	cert, pool, err := identity(dir, id)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}, nil
}

// ClientTLS is the TLS configuration of process id calling process peer:
// its own certificate, and the peer's checked against the cluster's CA
// and against peer's id.
func ClientTLS(dir, id, peer string) (*tls.Config, error) {
	cert, pool, err := identity(dir, id)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ServerName:   peer,
		MinVersion:   tls.VersionTLS13,
	}, nil
}

// identity loads process id's certificate and the CA that signed it.
func identity(dir, id string) (tls.Certificate, *x509.CertPool, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, id+certExt), filepath.Join(dir, id+keyExt))
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("cluster TLS: %s's certificate in %s (run oblivkv cluster certs): %w", id, dir, err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, caName+certExt))
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("cluster TLS: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return tls.Certificate{}, nil, fmt.Errorf("cluster TLS: no certificate in %s", filepath.Join(dir, caName+certExt))
	}
	return cert, pool, nil
}
