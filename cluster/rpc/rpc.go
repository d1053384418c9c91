// Package rpc carries sealed messages between a cluster's processes over
// gRPC under mutual TLS: a Server that hands each Envelope to a Handler,
// and a Client per peer.
//
// It owns the connections and the identity of each caller: the sender an
// Envelope names must be the process id its TLS certificate names, so a
// process cannot speak for another. It never seals, opens or interprets a
// message (the layers do, under the store key), and it never retries a
// call: whether one may be sent again is the caller's to decide, by the
// message's id.
//
// Why gRPC: the cluster's calls are request and reply between long-lived
// peers, which gRPC multiplexes over one HTTP/2 connection per peer with
// deadlines, cancellation and status codes; protobuf carries only the
// envelope (docs/dependencies.md).
package rpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/oblivkv/oblivkv/cluster/rpc/rpcpb"
)

// Message is one sealed message or reply.
type Message struct {
	Kind   uint32
	Sealed []byte
}

// Handler answers the messages a process receives.
type Handler interface {
	// Handle answers one message from process from.
	Handle(ctx context.Context, from string, m Message) (Message, error)
}

// NotLeaderError is a Handler's answer on a replica that does not lead its
// group: the caller should call Leader (if known) instead.
type NotLeaderError struct{ Leader string }

func (e *NotLeaderError) Error() string {
	return fmt.Sprintf("rpc: not the leader (leader: %q)", e.Leader)
}

// notLeaderPrefix starts a NotLeaderError's status message on the wire.
const notLeaderPrefix = "not leader; leader="

// Server serves one process's Layer service.
type Server struct {
	rpcpb.UnimplementedLayerServer
	id        string
	h         Handler
	plaintext bool
	grpc      *grpc.Server
}

// NewServer returns the server of process id. tlsCfg must require client
// certificates (cluster.ServerTLS); nil is plaintext, for loopback tests
// and the explicit plaintext flag only, and then callers' ids go
// unchecked.
func NewServer(id string, tlsCfg *tls.Config, h Handler) *Server {
	s := &Server{id: id, h: h, plaintext: tlsCfg == nil}
	var opts []grpc.ServerOption
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	s.grpc = grpc.NewServer(opts...)
	rpcpb.RegisterLayerServer(s.grpc, s)
	return s
}

// Serve serves on ln until Stop.
func (s *Server) Serve(ln net.Listener) error { return s.grpc.Serve(ln) }

// stopGrace bounds how long Stop lets calls in flight finish.
const stopGrace = 2 * time.Second

// Stop stops serving: it takes no new call, lets the calls in flight
// finish and send their answers for up to stopGrace (an answer already
// made, such as a leader's to the remove-server that removed it, reaches
// its caller), then fails those still running.
func (s *Server) Stop() {
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(stopGrace):
		s.grpc.Stop()
		<-done
	}
}

// Call implements rpcpb.LayerServer.
func (s *Server) Call(ctx context.Context, e *rpcpb.Envelope) (*rpcpb.Envelope, error) {
	if e.To != s.id {
		return nil, status.Errorf(codes.InvalidArgument, "message for %q delivered to %q", e.To, s.id)
	}
	if err := s.checkSender(ctx, e.From); err != nil {
		return nil, err
	}
	reply, err := s.h.Handle(ctx, e.From, Message{Kind: e.Kind, Sealed: e.Sealed})
	if err != nil {
		return nil, toStatus(err)
	}
	return &rpcpb.Envelope{Kind: reply.Kind, From: s.id, To: e.From, Sealed: reply.Sealed}, nil
}

// checkSender refuses an envelope whose sender is not the process its
// certificate names.
func (s *Server) checkSender(ctx context.Context, from string) error {
	if s.plaintext {
		return nil
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return status.Error(codes.Unauthenticated, "no peer")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return status.Error(codes.Unauthenticated, "no client certificate")
	}
	if cn := info.State.PeerCertificates[0].Subject.CommonName; cn != from {
		return status.Errorf(codes.PermissionDenied, "process %q sent a message as %q", cn, from)
	}
	return nil
}

// toStatus turns a Handler's error into a gRPC status.
func toStatus(err error) error {
	var nl *NotLeaderError
	if errors.As(err, &nl) {
		return status.Error(codes.FailedPrecondition, notLeaderPrefix+nl.Leader)
	}
	return status.Error(codes.Unknown, err.Error())
}

// Client calls one peer.
type Client struct {
	id, peer string
	conn     *grpc.ClientConn
	layer    rpcpb.LayerClient
}

// Dial returns process id's client of process peer at addr. tlsCfg checks
// the peer's certificate against its id (cluster.ClientTLS); nil is
// plaintext. gRPC connects lazily and reconnects on its own.
func Dial(id, peer, addr string, tlsCfg *tls.Config) (*Client, error) {
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("rpc: %s: %w", peer, err)
	}
	return &Client{id: id, peer: peer, conn: conn, layer: rpcpb.NewLayerClient(conn)}, nil
}

// Call sends m and returns the reply. A refusal of a replica that does not
// lead is a *NotLeaderError.
func (c *Client) Call(ctx context.Context, m Message) (Message, error) {
	reply, err := c.layer.Call(ctx, &rpcpb.Envelope{Kind: m.Kind, From: c.id, To: c.peer, Sealed: m.Sealed})
	if err != nil {
		return Message{}, fromStatus(c.peer, err)
	}
	if reply.From != c.peer || reply.To != c.id {
		return Message{}, fmt.Errorf("rpc: a reply from %q to %q on the connection to %q", reply.From, reply.To, c.peer)
	}
	return Message{Kind: reply.Kind, Sealed: reply.Sealed}, nil
}

// fromStatus turns a gRPC status back into an error.
func fromStatus(peer string, err error) error {
	st, _ := status.FromError(err)
	if st.Code() == codes.FailedPrecondition && strings.HasPrefix(st.Message(), notLeaderPrefix) {
		return &NotLeaderError{Leader: strings.TrimPrefix(st.Message(), notLeaderPrefix)}
	}
	return fmt.Errorf("rpc: call to %s: %w", peer, err)
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }
