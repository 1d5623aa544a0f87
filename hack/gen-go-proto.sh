#!/usr/bin/env bash
# Writes the Go code of mcm.driver.v1 (proto/mcm/driver/v1/driver.proto) for
# the Go bridge: hack/reference/driverpb/{driver.pb.go,driver_grpc.pb.go}.
# No system protoc: the generator (hack/protogen-go) compiles the proto in Go
# and runs protoc-gen-go and protoc-gen-go-grpc, all from the Go module proxy.
#   --check   regenerate into a temporary folder and fail if the committed
#             files differ (a stale generated file)
# The generated files name the proto's SHA-256 on their first line; a test of
# crates/driver-grpc (go_bridge) compares it with the proto without Go.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$ROOT/hack/reference/driverpb"
command -v go >/dev/null || { echo "go is not installed" >&2; exit 1; }
export GOWORK=off GOTOOLCHAIN=local GOFLAGS=-mod=mod
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
(cd "$ROOT/hack/protogen-go" && go build -o "$TMP/protogen-go" . \
  && go build -o "$TMP/protoc-gen-go-grpc" google.golang.org/grpc/cmd/protoc-gen-go-grpc)
DEST="$OUT"
[ "${1:-}" = "--check" ] && DEST="$TMP/out"
"$TMP/protogen-go" "$ROOT/proto" mcm/driver/v1/driver.proto \
  github.com/mcm-rs/mcm-rs/hack/reference/driverpb "$DEST" "$TMP/protoc-gen-go-grpc"
if [ "${1:-}" = "--check" ]; then
  if ! diff -ru "$OUT" "$DEST" >&2; then
    echo "hack/reference/driverpb is stale: run hack/gen-go-proto.sh" >&2; exit 1
  fi
  echo "hack/reference/driverpb is up to date" >&2
fi
