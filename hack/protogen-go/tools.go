//go:build tools

// Pins protoc-gen-go-grpc, which hack/gen-go-proto.sh builds from this module.
package main

import _ "google.golang.org/grpc/cmd/protoc-gen-go-grpc"
