#!/usr/bin/env bash
# Builds the reference's two halves for side-by-side runs with mcm-rs
# (docs/design/reference-halves.md) from the Go module proxy:
#   machine-controller-manager  Gardener's v0.62.1 manager half, unchanged
#   machine-controller-local    the reference's provider library (app.Run)
#                               with our driver for the local cloud
#   driver-bridge               serves a Go driver (local, or the reference's
#                               fake) over mcm.driver.v1 (docs/design/driver.md)
# The module is hack/reference; binaries are cached under
# $HOME/.cache/mcm-reference/<hash of go.mod and go.sum and the driver>/.
# Prints the bin folder on its last line of stdout; progress goes to stderr.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC="$ROOT/hack/reference"
log() { echo "[reference] $*" >&2; }
KEY=$(cd "$SRC" && cat go.mod go.sum $(find . -name '*.go' | sort) | sha256sum | cut -c1-16)
DIR="${MCM_REFERENCE_CACHE:-$HOME/.cache/mcm-reference}/$KEY"
if [ -x "$DIR/bin/machine-controller-manager" ] && [ -x "$DIR/bin/machine-controller-local" ] \
  && [ -x "$DIR/bin/driver-bridge" ]; then
  log "reusing cached $DIR/bin"
  echo "$DIR/bin"; exit 0
fi
command -v go >/dev/null || { log "go is not installed: it is needed to build the reference"; exit 1; }
rm -rf "$DIR.tmp"; mkdir -p "$DIR.tmp/bin"
export GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
T0=$SECONDS
log "building machine-controller-manager v0.62.1, machine-controller-local and driver-bridge ... (a cold build takes minutes on 2 cores)"
(cd "$SRC" && go build -trimpath -ldflags "-s -w" -o "$DIR.tmp/bin/machine-controller-manager" \
  github.com/gardener/machine-controller-manager/cmd/machine-controller-manager)
(cd "$SRC" && go build -trimpath -ldflags "-s -w" -o "$DIR.tmp/bin/machine-controller-local" \
  ./cmd/machine-controller-local)
(cd "$SRC" && go build -trimpath -ldflags "-s -w -X main.version=$KEY" -o "$DIR.tmp/bin/driver-bridge" \
  ./cmd/driver-bridge)
rm -rf "$DIR"; mv "$DIR.tmp" "$DIR"
log "built the reference halves and the bridge in $((SECONDS - T0)) s into $DIR/bin"
echo "$DIR/bin"
