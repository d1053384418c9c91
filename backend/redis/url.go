package redis

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"

	goredis "github.com/redis/go-redis/v9"
)

// The query parameters of a rediss:// URL that name TLS files, besides
// those go-redis reads itself (e.g. skip_verify).
const (
	paramCA   = "tls_ca"   // PEM CA certificates that verify the server (default: the system's)
	paramCert = "tls_cert" // PEM client certificate, for a server that requires one
	paramKey  = "tls_key"  // its PEM private key
)

// errBadURL never quotes the URL: it may hold a password.
var errBadURL = errors.New("redis: bad URL (not shown: it may hold a password)")

// parseURL is go-redis's ParseURL plus the TLS file parameters tls_ca,
// tls_cert and tls_key, which only a rediss:// URL may have.
func parseURL(raw string) (*goredis.Options, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errBadURL
	}
	q := u.Query()
	files := tlsFiles{ca: q.Get(paramCA), cert: q.Get(paramCert), key: q.Get(paramKey)}
	q.Del(paramCA)
	q.Del(paramCert)
	q.Del(paramKey)
	u.RawQuery = q.Encode()
	opt, err := goredis.ParseURL(u.String())
	if err != nil {
		return nil, fmt.Errorf("redis: bad URL: %w", err) // not quoted: it may hold a password
	}
	if files == (tlsFiles{}) {
		return opt, nil
	}
	if opt.TLSConfig == nil {
		return nil, fmt.Errorf("redis: %s, %s and %s need a rediss:// URL", paramCA, paramCert, paramKey)
	}
	if err := files.apply(opt.TLSConfig); err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	return opt, nil
}

// tlsFiles are the paths of a rediss:// URL's TLS parameters.
type tlsFiles struct{ ca, cert, key string }

func (f tlsFiles) apply(conf *tls.Config) error {
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return fmt.Errorf("%s: %w", paramCA, err)
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s: no PEM certificate in %s", paramCA, f.ca)
		}
	}
	if (f.cert == "") != (f.key == "") {
		return fmt.Errorf("give both %s and %s, or neither", paramCert, paramKey)
	}
	if f.cert != "" {
		cert, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return fmt.Errorf("%s and %s: %w", paramCert, paramKey, err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return nil
}
