#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager and etcd from the wrapper module
# in hack/kube-testenv with the ordinary `go` command, and caches the binaries
# under $HOME/.cache/mcm-kube-testenv/<k8s version>-<hash of go.mod+go.sum>.
# Prints the binary folder on its last line of stdout. Progress goes to stderr.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
W="$ROOT/hack/kube-testenv"
K8S=$(cat "$W/K8S_VERSION")
MINOR=${K8S#v1.}; MINOR=${MINOR%%.*}
KEY=$(cat "$W/go.mod" "$W/go.sum" | sha256sum | cut -c1-12)
BIN="${MCM_TESTENV_CACHE:-$HOME/.cache/mcm-kube-testenv}/$K8S-$KEY"
log() { echo "[control-plane] $*" >&2; }
if [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/etcd" ] && [ -x "$BIN/kube-controller-manager" ]; then
  log "reusing cached binaries in $BIN"
  echo "$BIN"; exit 0
fi
command -v go >/dev/null || { log "go is not installed: it is needed to build the test control plane"; exit 1; }
# One builder at a time (several test environments may start at once): the others
# wait for the lock and then reuse what the first one built.
mkdir -p "$(dirname "$BIN")"
exec 9>"$BIN.lock"
flock 9
if [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/etcd" ] && [ -x "$BIN/kube-controller-manager" ]; then
  log "reusing binaries another build just finished in $BIN"
  echo "$BIN"; exit 0
fi
rm -rf "$BIN.tmp"; mkdir -p "$BIN.tmp"
export GOWORK=off GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0
VER="-X k8s.io/component-base/version.gitVersion=$K8S -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$MINOR"
cd "$W"
build() { # name package ldflags
  local t0=$SECONDS
  log "building $1 ($K8S) ... (cold builds take minutes on 2 cores)"
  go build -trimpath -ldflags "-s -w $3" -o "$BIN.tmp/$1" "$2"
  log "built $1 in $((SECONDS - t0)) s"
}
T0=$SECONDS
log "downloading modules"; go mod download
build etcd go.etcd.io/etcd/server/v3 ""
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$VER"
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$VER"
[ -e "$BIN" ] && rm -rf "$BIN"
mv "$BIN.tmp" "$BIN"
log "control plane built in $((SECONDS - T0)) s into $BIN"
echo "$BIN"
