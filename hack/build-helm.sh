#!/usr/bin/env bash
# Builds helm (the Go module helm.sh/helm/v4, version in $HELM_VERSION or
# v4.3.2) with the ordinary `go install` from the Go module proxy, and caches
# the binary under $HOME/.cache/mcm-helm/<version>/helm. Prints the binary's
# path on its last line of stdout. Progress goes to stderr.
set -euo pipefail
VERSION=${HELM_VERSION:-v4.3.2}
DIR="${MCM_HELM_CACHE:-$HOME/.cache/mcm-helm}/$VERSION"
log() { echo "[helm] $*" >&2; }
if [ -x "$DIR/helm" ]; then
  log "reusing cached $DIR/helm"
  echo "$DIR/helm"; exit 0
fi
command -v go >/dev/null || { log "go is not installed: it is needed to build helm"; exit 1; }
mkdir -p "$DIR.tmp"
export GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0 GOBIN="$DIR.tmp"
T0=$SECONDS
log "building helm $VERSION ... (a cold build takes minutes on 2 cores)"
go install -trimpath -ldflags "-s -w" "helm.sh/helm/v4/cmd/helm@$VERSION"
rm -rf "$DIR"; mv "$DIR.tmp" "$DIR"
log "built helm in $((SECONDS - T0)) s into $DIR"
echo "$DIR/helm"
