package raftgroup

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// streamLayer is raft's network transport's connections: TCP, under
// mutual TLS unless the configuration is plaintext on loopback.
type streamLayer struct {
	net.Listener
	clientTLS func(addr string) (*tls.Config, error) // nil: plaintext
}

// listen opens this replica's raft listener.
func listen(cfg Config) (*streamLayer, error) {
	ln, err := net.Listen("tcp", cfg.addr())
	if err != nil {
		return nil, fmt.Errorf("raftgroup: listening on %s: %w", cfg.addr(), err)
	}
	if cfg.ServerTLS != nil {
		ln = tls.NewListener(ln, cfg.ServerTLS)
	}
	return &streamLayer{Listener: ln, clientTLS: cfg.ClientTLS}, nil
}

// Dial implements raft.StreamLayer.
func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if s.clientTLS == nil {
		return d.Dial("tcp", string(addr))
	}
	cfg, err := s.clientTLS(string(addr))
	if err != nil {
		return nil, err
	}
	return tls.DialWithDialer(d, "tcp", string(addr), cfg)
}
