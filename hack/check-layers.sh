#!/usr/bin/env bash
# Checks the crate layers (docs/design/crates.md) with `cargo tree`, which
# reads Cargo.lock and builds nothing (about a second):
#   - mcm-core builds no async runtime (no tokio among its dependencies);
#   - mcm-api depends on kube-core and kube-derive only (no kube client or
#     runtime, not even through the kube facade);
#   - the shipped binary links no test support (mcm-testenv) and, without
#     the `local` feature, not the local cloud (mcm-provider-local, redb).
# Exits non-zero, naming the broken rule, when one does not hold.
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0
deps() { cargo tree --locked -e normal --prefix none --format '{p}' "$@" | awk '{ print $1 }' | sort -u; }
forbid() { # rule crate-list forbidden...
  local rule=$1 list=$2
  shift 2
  for name in "$@"; do
    if grep -qx "$name" <<<"$list"; then
      echo "[layers] FAILED: $rule: depends on $name" >&2
      fail=1
    fi
  done
}
forbid "mcm-core builds without tokio" "$(deps -p mcm-core)" tokio
forbid "mcm-api uses kube-core and kube-derive only" "$(deps -p mcm-api)" kube kube-client kube-runtime tokio
forbid "the mcm binary links no test support" "$(deps -p mcm)" mcm-testenv
forbid "the mcm binary without feature local links no local cloud" \
  "$(deps -p mcm --no-default-features --features aws)" mcm-provider-local redb mcm-testenv
[ "$fail" = 0 ] && echo "[layers] ok: core without tokio, api without kube's client, mcm without test support"
exit "$fail"
