// Package rpcpb is the Go code protoc generates from layer.proto (the
// Envelope message and the Layer service); scripts/genproto regenerates
// it. It must never be edited by hand.
package rpcpb
