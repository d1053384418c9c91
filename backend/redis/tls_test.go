package redis_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/backendtest"
	"github.com/oblivkv/oblivkv/backend/redis"
	"github.com/oblivkv/oblivkv/internal/testsupport/redistest"
)

// TestConformanceOverTLS runs the backend contract against a redis-server
// that accepts only TLS with a client certificate and a password, through
// a rediss://default:PASSWORD@... URL with tls_ca, tls_cert and tls_key.
// The cases share one database, each under its own prefix.
func TestConformanceOverTLS(t *testing.T) {
	srv := redistest.StartTLS(t)
	cases := 0
	open := func(t *testing.T) backend.Backend {
		cases++
		return backend.WithPrefix(openURL(t, srv.URL(0, true)), fmt.Sprintf("case%d:", cases))
	}
	backendtest.Run(t, open)
}

// TestTLSRefusals checks what a TLS backend refuses, and that no error
// quotes the password.
func TestTLSRefusals(t *testing.T) {
	srv := redistest.StartTLS(t)
	withCert := srv.URL(0, true)
	plain := strings.Replace(withCert, "rediss://", "redis://", 1)
	for _, c := range []struct{ name, url, want string }{
		{"no client certificate", srv.URL(0, false), "certificate required"},
		{"wrong password", strings.Replace(withCert, srv.Password, "not-it", 1), "WRONGPASS"},
		{"CA not given", withoutParam(t, withCert, "tls_ca"), "certificate signed by unknown authority"},
		{"TLS files on redis://", plain, "need a rediss:// URL"},
		{"certificate without key", withoutParam(t, withCert, "tls_key"), "give both tls_cert and tls_key"},
		{"missing CA file", strings.Replace(withCert, "tls_ca=", "tls_ca=%2Fnope", 1), "tls_ca: open /nope"},
		{"bad URL", "rediss://default:" + srv.Password + "@[::1", "bad URL"},
	} {
		b, err := redis.Open(context.Background(), c.url)
		if err == nil {
			b.Close()
			t.Errorf("%s: Open succeeded", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
		if strings.Contains(err.Error(), srv.Password) {
			t.Errorf("%s: the error quotes the password: %v", c.name, err)
		}
	}
}

func withoutParam(t *testing.T, raw, param string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Del(param)
	u.RawQuery = q.Encode()
	return u.String()
}
