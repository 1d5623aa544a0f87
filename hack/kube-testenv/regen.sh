#!/usr/bin/env bash
# Regenerates go.mod/go.sum of the test control-plane wrapper module.
# Usage: hack/kube-testenv/regen.sh v1.36.3
# The wrapper requires k8s.io/kubernetes and points every staging module that
# k8s.io/kubernetes replaces into ./staging at its published v0.Y.Z tag, so the
# ordinary `go` command can build kube-apiserver, kube-controller-manager and
# etcd from the Go module proxy. The staging list is read from the real go.mod.
set -euo pipefail
K8S=${1:?usage: regen.sh v1.Y.Z}
STAGING="v0.${K8S#v1.}"
cd "$(dirname "$0")"
export GOWORK=off GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
rm -f go.mod go.sum
go mod init mcm.invalid/kube-testenv
go mod edit -go=1.26.0
KGOMOD=$(go mod download -json "k8s.io/kubernetes@$K8S" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
grep -E '^godebug ' "$KGOMOD" >> go.mod || true
for m in $(sed -n 's|^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/.*|\1|p' "$KGOMOD"); do
  go mod edit -replace="$m=$m@$STAGING"
done
go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$K8S"
go get -tool "k8s.io/kubernetes/cmd/kube-controller-manager@$K8S"
ETCD=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
go get -tool "go.etcd.io/etcd/server/v3@$ETCD"
go mod tidy
echo "$K8S" > K8S_VERSION
