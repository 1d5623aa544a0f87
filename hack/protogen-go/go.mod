// The generator of the Go code of mcm.driver.v1 (hack/gen-go-proto.sh): the
// proto compiled in Go (no system protoc), then protoc-gen-go and
// protoc-gen-go-grpc. A module of its own so that the generator's
// dependencies stay out of hack/reference's graph.
module github.com/mcm-rs/mcm-rs/hack/protogen-go

go 1.26.2

require (
	github.com/bufbuild/protocompile v0.14.1
	google.golang.org/grpc/cmd/protoc-gen-go-grpc v1.6.2
	google.golang.org/protobuf v1.36.12
)

require golang.org/x/sync v0.8.0 // indirect
