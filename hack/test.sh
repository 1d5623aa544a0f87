#!/usr/bin/env bash
# Runs every test of the workspace against real services: builds (cached) and
# starts the test control plane (etcd, kube-apiserver, kube-controller-manager)
# and moto_server for the AWS provider, runs fmt/clippy/tests, and stops the
# services again, also when a test fails. Exits non-zero on any failure.
# It started every service, so none of them may be missing: a test that would
# skip for a missing service fails instead (MCM_TEST_REQUIRE_SERVICES, as CI),
# and one whose service answers but is unusable fails everywhere
# (crates/testenv/src/skip.rs).
#
#   bash hack/test.sh              everything
#   bash hack/test.sh -p mcm-api   extra arguments go to `cargo test`
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/mcm-rs/target}
export MCM_TESTENV_DIR=${MCM_TESTENV_DIR:-$ROOT/.mcm/testenv}
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
export MCM_TEST_REQUIRE_SERVICES=1
# Each crate's integration tests are one binary whose tests mostly wait on the
# control plane and the clouds' fakes, so four run side by side on 2 cores.
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-4}
T0=$SECONDS
say() { echo "[test] $*"; }

cleanup() {
  local rc=$?
  [ -n "${MOTO_PID:-}" ] && kill "$MOTO_PID" 2>/dev/null || true
  bash hack/testenv.sh down || true
  say "finished in $((SECONDS - T0)) s with exit code $rc"
  exit $rc
}
trap cleanup EXIT INT TERM

say "control plane"
bash hack/testenv.sh up
export KUBECONFIG=$MCM_TESTENV_DIR/kubeconfig

say "helm (for the chart tests)"
MCM_HELM=$(bash hack/build-helm.sh | tail -n1)
export MCM_HELM

say "the Go driver bridge (for crates/mcm/tests/go_bridge.rs)"
# Cached by the hash of hack/reference (go.mod, go.sum, *.go); a cold build
# also builds the reference's halves from the Go module proxy.
MCM_DRIVER_BRIDGE=$(bash hack/build-reference.sh | tail -n1)/driver-bridge
export MCM_DRIVER_BRIDGE

if [ -f hack/moto.sh ]; then
  say "moto_server"
  # shellcheck disable=SC1091
  source hack/moto.sh
  start_moto
fi

if [ "${MCM_SKIP_LINT:-}" != "1" ]; then
  say "cargo fmt --check"
  cargo fmt --all -- --check
  say "crate layers (cargo tree)"
  bash hack/check-layers.sh
  say "cargo clippy"
  t=$SECONDS
  cargo clippy --workspace --all-targets --quiet -- -D warnings
  say "clippy took $((SECONDS - t)) s"
fi

say "cargo test"
t=$SECONDS
cargo test --workspace --no-fail-fast "$@"
say "tests took $((SECONDS - t)) s"
