#!/usr/bin/env bash
# The main job: builds `mcm` and runs a local environment with real machines of
# the `local` provider (`mcm up`). Extra arguments go to `mcm up`.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/mcm-rs/target}
cargo build -p mcm --no-default-features --features local
mkdir -p target/debug
ln -sf "$CARGO_TARGET_DIR/debug/mcm" target/debug/mcm
exec "$CARGO_TARGET_DIR/debug/mcm" up "$@"
