package rpc

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/cluster"
)

// echo answers each message with its bytes reversed, naming the sender
// in the kind's place; the kind 99 is refused as not the leader.
type echo struct{}

func (echo) Handle(_ context.Context, from string, m Message) (Message, error) {
	if m.Kind == 99 {
		return Message{}, &NotLeaderError{Leader: "stash-0-b"}
	}
	out := make([]byte, len(m.Sealed))
	for i, b := range m.Sealed {
		out[len(out)-1-i] = b
	}
	return Message{Kind: uint32(len(from)), Sealed: out}, nil
}

func certs(t *testing.T) string {
	t.Helper()
	cfg, err := cluster.Load("../example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := cluster.WriteCerts(cfg, dir, time.Hour, false); err != nil {
		t.Fatal(err)
	}
	return dir
}

// serve starts process id's server on a loopback port.
func serve(t *testing.T, id string, tlsCfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(id, tlsCfg, echo{})
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

func serverTLS(t *testing.T, dir, id string) *tls.Config {
	t.Helper()
	c, err := cluster.ServerTLS(dir, id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// dial returns a client that presents id's certificate, says it is from
// as, and expects peer.
func dial(t *testing.T, dir, id, as, peer, addr string) *Client {
	t.Helper()
	c, err := cluster.ClientTLS(dir, id, peer)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := Dial(as, peer, addr, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestCallOverMutualTLS(t *testing.T) {
	dir := certs(t)
	addr := serve(t, "stash-0-a", serverTLS(t, dir, "stash-0-a"))
	cl := dial(t, dir, "router-0", "router-0", "stash-0-a", addr)
	reply, err := cl.Call(ctx(t), Message{Kind: 1, Sealed: []byte("abc")})
	if err != nil || string(reply.Sealed) != "cba" || reply.Kind != uint32(len("router-0")) {
		t.Fatalf("Call = %+v, %v", reply, err)
	}
	var nl *NotLeaderError
	if _, err := cl.Call(ctx(t), Message{Kind: 99}); !errors.As(err, &nl) || nl.Leader != "stash-0-b" {
		t.Fatalf("Call to a replica that does not lead = %v, want a NotLeaderError naming stash-0-b", err)
	}
}

func TestSenderMustBeItsCertificate(t *testing.T) {
	dir := certs(t)
	addr := serve(t, "stash-0-a", serverTLS(t, dir, "stash-0-a"))
	cl := dial(t, dir, "router-0", "router-1", "stash-0-a", addr)
	if _, err := cl.Call(ctx(t), Message{Kind: 1}); err == nil || !strings.Contains(err.Error(), `"router-0" sent a message as "router-1"`) {
		t.Fatalf("router-0 speaking as router-1: %v, want a refusal", err)
	}
}

func TestWrongPeerRefused(t *testing.T) {
	dir := certs(t)
	addr := serve(t, "stash-0-b", serverTLS(t, dir, "stash-0-b"))
	cl := dial(t, dir, "router-0", "router-0", "stash-0-a", addr)
	if _, err := cl.Call(ctx(t), Message{Kind: 1}); err == nil {
		t.Fatal("a call meant for stash-0-a was answered by stash-0-b")
	}
}

func TestPlaintextOnLoopback(t *testing.T) {
	addr := serve(t, "stash-0-a", nil)
	cl, err := Dial("router-0", "stash-0-a", addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if reply, err := cl.Call(ctx(t), Message{Sealed: []byte("xy")}); err != nil || string(reply.Sealed) != "yx" {
		t.Fatalf("plaintext Call = %+v, %v", reply, err)
	}
	dir := certs(t)
	tlsAddr := serve(t, "stash-0-a", serverTLS(t, dir, "stash-0-a"))
	plain, err := Dial("router-0", "stash-0-a", tlsAddr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Call(ctx(t), Message{}); err == nil {
		t.Fatal("a plaintext caller was answered by a TLS server")
	}
}

// held answers each message once released is closed, telling started
// that a call is in.
type held struct{ started, released chan struct{} }

func (h held) Handle(_ context.Context, _ string, m Message) (Message, error) {
	close(h.started)
	<-h.released
	return m, nil
}

// TestStopAnswersCallsInFlight: a call whose answer is made after Stop
// began still gets it, and Stop returns once it is sent.
func TestStopAnswersCallsInFlight(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := held{started: make(chan struct{}), released: make(chan struct{})}
	s := NewServer("stash-0-a", nil, h)
	go s.Serve(ln)
	cl, err := Dial("router-0", "stash-0-a", ln.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	answered := make(chan error, 1)
	go func() {
		reply, err := cl.Call(ctx(t), Message{Sealed: []byte("xy")})
		if err == nil && string(reply.Sealed) != "xy" {
			err = errors.New("answered " + string(reply.Sealed))
		}
		answered <- err
	}()
	<-h.started
	stopped := make(chan struct{})
	go func() {
		s.Stop()
		close(stopped)
	}()
	for deadline := time.Now().Add(10 * time.Second); ; { // Stop has begun once the listener refuses connections
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			close(h.released)
			t.Fatal("the listener still accepts connections 10 s after Stop began")
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(h.released)
	if err := <-answered; err != nil {
		t.Fatalf("a call in flight when Stop began: %v; want its answer", err)
	}
	<-stopped
}
