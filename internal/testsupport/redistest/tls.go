package redistest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"testing"

	"github.com/oblivkv/oblivkv/internal/testsupport/testcerts"
)

// TLSServer is a redis-server for one test that accepts only TLS
// connections with a client certificate its CA signed, and requires a
// password.
type TLSServer struct {
	Addr     string         // 127.0.0.1:PORT
	Password string         // the default user's
	Certs    *testcerts.Set // the server's CA and a client certificate
}

// StartTLS starts a TLS redis-server for this test only, with fresh
// certificates (package testcerts) and a random password. It is stopped
// when the test ends.
func StartTLS(t testing.TB) *TLSServer {
	t.Helper()
	Require(t, "redis-server")
	certs := testcerts.New(t)
	s, err := start(t.TempDir(), options{databases: 16, certs: certs, password: randomPassword(t)})
	if err != nil {
		t.Fatalf("redistest: TLS server: %v", err)
	}
	t.Cleanup(s.stop)
	return &TLSServer{Addr: s.addr, Password: s.password, Certs: certs}
}

// URL returns the server's database db as backend/redis opens it:
// rediss://default:PASSWORD@127.0.0.1:PORT/DB with the query parameters
// tls_ca, and, when withCert, tls_cert and tls_key.
func (s *TLSServer) URL(db int, withCert bool) string {
	q := url.Values{"tls_ca": {s.Certs.CA}}
	if withCert {
		q.Set("tls_cert", s.Certs.ClientCert)
		q.Set("tls_key", s.Certs.ClientKey)
	}
	u := url.URL{Scheme: "rediss", User: url.UserPassword("default", s.Password), Host: s.Addr,
		Path: fmt.Sprintf("/%d", db), RawQuery: q.Encode()}
	return u.String()
}

func randomPassword(t testing.TB) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
