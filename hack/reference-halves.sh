#!/usr/bin/env bash
# Each half of mcm-rs next to the real Go half (docs/design/reference-halves.md):
# Gardener's machine-controller-manager v0.62.1 and the reference's
# machine-controller (its provider library with our local-cloud driver,
# hack/reference), built from the Go module proxy by hack/build-reference.sh,
# against a control plane of its own and the local cloud.
#
#   bash hack/reference-halves.sh                     every scenario
#   bash hack/reference-halves.sh go_manager_rs_controller   only the named ones
#
# Scenarios:
#   go_manager_rs_controller   Go manager + mcm-rs machine-controller: a
#                              MachineDeployment of 3 to Running, a rolling
#                              update to a new class, a scale to 0 that leaves
#                              no Machine, VM or Node
#   rs_manager_go_controller   the same with mcm-rs's manager and the Go controller
#   live_migration             Go halves with 5 Running machines, then each half
#                              swapped to mcm-rs in turn: no Machine replaced, no
#                              VM created or deleted, no Node cordoned
# Writes its table to docs/reference-halves-report.md (MCM_REF_REPORT=none: not
# written). Exit code 0 only when every scenario passed.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
ALL="go_manager_rs_controller rs_manager_go_controller live_migration"
SCENARIOS=${*:-$ALL}
REPORT=${MCM_REF_REPORT:-$ROOT/docs/reference-halves-report.md}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/mcm-rs/target}
KUBECTL=${KUBECTL:-$(command -v kubectl || echo /usr/bin/kubectl)}
T0=$SECONDS
LIB_TAG=halves LIB_T0=$T0
# shellcheck source=hack/lib.sh
source "$ROOT/hack/lib.sh"
for tool in python3 jq curl "$KUBECTL"; do command -v "$tool" >/dev/null || die "$tool is required"; done
for s in $SCENARIOS; do case " $ALL " in *" $s "*) ;; *) die "unknown scenario $s (scenarios: $ALL)" ;; esac; done

WORK=${MCM_REF_WORK:-$(mktemp -d /tmp/mcm-halves.XXXXXX)}
mkdir -p "$WORK/logs" "$WORK/pids"
ENV_DIR=$WORK/testenv
say "work folder: $WORK"

stop() { [ -e "$WORK/pids/$1" ] && { stop_pid "$(cat "$WORK/pids/$1")"; rm -f "$WORK/pids/$1"; }; return 0; }
STARTED=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  for f in "$WORK"/pids/*; do [ -e "$f" ] && stop_pid "$(cat "$f")"; done
  [ -n "$STARTED" ] && { MCM_TESTENV_DIR=$ENV_DIR bash hack/testenv.sh down >/dev/null 2>&1 || true; }
  say "finished with exit code $rc after $((SECONDS - T0)) s (logs in $WORK/logs)"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "building the reference halves (cached by their go.sum)"
t=$SECONDS
REF_BIN=$(bash hack/build-reference.sh 2> "$WORK/logs/build-reference.log" | tail -n1) \
  || { cat "$WORK/logs/build-reference.log" >&2; die "hack/build-reference.sh"; }
BUILD_REF_S=$((SECONDS - t))
if grep -q "reusing cached" "$WORK/logs/build-reference.log"; then BUILD_REF="cached binaries"; else BUILD_REF="built in ${BUILD_REF_S} s"; fi
say "building mcm (debug, local provider only)"
cargo build -p mcm --no-default-features --features local --quiet
cp "$CARGO_TARGET_DIR/debug/mcm" "$WORK/mcm"
MCM=$WORK/mcm

say "starting a control plane of its own"
STARTED=1
MCM_TESTENV_DIR=$ENV_DIR bash hack/testenv.sh up 2> "$WORK/logs/testenv-up.log" \
  || { cat "$WORK/logs/testenv-up.log" >&2; die "hack/testenv.sh up"; }
KC=$ENV_DIR/kubeconfig
k() { "$KUBECTL" --kubeconfig "$KC" --request-timeout 30s "$@"; }
"$MCM" crds | k apply --server-side -f - >/dev/null
k wait --for condition=established --timeout=60s crd/machines.machine.sapcloud.io \
  crd/machinesets.machine.sapcloud.io crd/machinedeployments.machine.sapcloud.io \
  crd/machineclasses.machine.sapcloud.io >/dev/null

CLOUD_PORT=$(free_port)
CLOUD_URL=http://127.0.0.1:$CLOUD_PORT
NO_COLOR=1 "$MCM" local-cloud serve --port "$CLOUD_PORT" --store "$WORK/cloud.redb" \
  --target-kubeconfig "$KC" --boot-delay 1s > "$WORK/logs/local-cloud.log" 2>&1 &
echo $! > "$WORK/pids/cloud"
for _ in $(seq 1 100); do curl -sf "$CLOUD_URL/admin/stats" >/dev/null 2>&1 && break; sleep 0.2; done
curl -sf "$CLOUD_URL/admin/stats" >/dev/null || die "the local cloud did not start"

# The halves. Each takes the reference's flags; only the local cloud URL is ours.
common() { echo --control-kubeconfig "$KC" --target-kubeconfig "$KC" --namespace "$1" --leader-elect=false; }
start_half() { # which(go|rs) half(manager|controller) namespace
  local impl=$1 half=$2 ns=$3 port log
  port=$(free_port); log="$WORK/logs/$SCENARIO-$impl-$half.log"
  # shellcheck disable=SC2046
  case "$impl-$half" in
    go-manager) "$REF_BIN/machine-controller-manager" $(common "$ns") --port "$port" \
        --safety-up 2 --safety-down 1 --machine-safety-overshooting-period 1m >> "$log" 2>&1 & ;;
    go-controller) "$REF_BIN/machine-controller-local" $(common "$ns") --port "$port" \
        --local-cloud-url "$CLOUD_URL" --machine-creation-timeout 5m --machine-drain-timeout 30s \
        --machine-safety-orphan-vms-period 15s >> "$log" 2>&1 & ;;
    rs-manager) NO_COLOR=1 "$MCM" machine-controller-manager $(common "$ns") --address 127.0.0.1 \
        --port "$port" >> "$log" 2>&1 & ;;
    rs-controller) NO_COLOR=1 "$MCM" machine-controller $(common "$ns") --address 127.0.0.1 \
        --port "$port" --local-cloud-url "$CLOUD_URL" --machine-creation-timeout 5m \
        --machine-drain-timeout 30s --machine-safety-orphan-vms-period 15s >> "$log" 2>&1 & ;;
  esac
  echo $! > "$WORK/pids/$half"
}

apply_class() { # namespace name
  k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Secret
metadata: {name: halves-secret, namespace: $1}
type: Opaque
stringData: {userData: "#cloud-config"}
---
apiVersion: machine.sapcloud.io/v1alpha1
kind: MachineClass
metadata: {name: $2, namespace: $1}
provider: local
providerSpec:
  image: local-ubuntu
  instanceType: $2
  tags: {kubernetes.io/cluster/shoot--halves-$1: "1", kubernetes.io/role/node: "1"}
secretRef: {name: halves-secret, namespace: $1}
EOF
}
apply_deployment() { # namespace replicas class
  k apply -f - >/dev/null <<EOF
apiVersion: machine.sapcloud.io/v1alpha1
kind: MachineDeployment
metadata: {name: pool, namespace: $1}
spec:
  replicas: $2
  minReadySeconds: 0
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}
  selector: {matchLabels: {pool: halves}}
  template:
    metadata: {labels: {pool: halves}}
    spec:
      class: {kind: MachineClass, name: $3}
EOF
}
machines() { k -n "$1" get machines.machine.sapcloud.io -o json 2>/dev/null || echo '{"items":[]}'; }
running() { machines "$1" | jq --arg c "$2" '[.items[] | select(.status.currentStatus.phase == "Running" and .spec.class.name == $c)] | length'; }
count() { machines "$1" | jq '.items | length'; }
vms() { curl -sf --max-time 10 "$CLOUD_URL/admin/instances" | jq --arg t "kubernetes.io/cluster/shoot--halves-$1" '[.instances[] | select(.tags[$t] != null)] | length'; }
nodes() { k get nodes -o json | jq --arg ns "$1" '[.items[] | select(.metadata.name | startswith("pool-"))] | length'; }
cordoned() { k get nodes -o json | jq '[.items[] | select(.spec.unschedulable == true)] | length'; }
stat() { curl -sf --max-time 10 "$CLOUD_URL/admin/stats" | jq --arg op "$1" '.operations[$op].ok // 0'; }
identities() { machines "$1" | jq -r '[.items[] | "\(.metadata.name)/\(.metadata.uid)/\(.spec.providerID)"] | sort | join(",")'; }
is() { [ "$("${@:1:$#-1}")" = "${!#}" ]; }

# A MachineDeployment of 3 to Running, rolled to class-b, scaled to 0.
lifecycle() { # manager-impl controller-impl namespace
  local ns=$3
  k create namespace "$ns" >/dev/null
  apply_class "$ns" class-a; apply_class "$ns" class-b
  start_half "$1" manager "$ns"; start_half "$2" controller "$ns"
  local t=$SECONDS
  apply_deployment "$ns" 3 class-a
  wait_for 240 "3 Running" is running "$ns" class-a 3 || return 0
  UP_S=$((SECONDS - t)); t=$SECONDS
  apply_deployment "$ns" 3 class-b
  wait_for 300 "3 Running on class-b" is running "$ns" class-b 3 || return 0
  wait_for 240 "the old machines gone" is count "$ns" 3 || return 0
  ROLL_S=$((SECONDS - t)); t=$SECONDS
  k -n "$ns" patch mcd pool --type merge -p '{"spec":{"replicas":0}}' >/dev/null
  wait_for 240 "no Machine" is count "$ns" 0 || return 0
  wait_for 120 "no VM" is vms "$ns" 0 || return 0
  wait_for 120 "no Node" is nodes "$ns" 0 || return 0
  DOWN_S=$((SECONDS - t))
  DETAIL="up ${UP_S}s, rolled ${ROLL_S}s, to zero ${DOWN_S}s"
}
scenario_go_manager_rs_controller() { lifecycle go rs halves-a; }
scenario_rs_manager_go_controller() { lifecycle rs go halves-b; }
scenario_live_migration() {
  local ns=halves-m before creates deletes
  k create namespace "$ns" >/dev/null
  apply_class "$ns" class-a
  start_half go manager "$ns"; start_half go controller "$ns"
  apply_deployment "$ns" 5 class-a
  wait_for 300 "5 Running under the Go halves" is running "$ns" class-a 5 || return 0
  sleep 10
  before=$(identities "$ns"); creates=$(stat create); deletes=$(stat delete)
  stop controller; start_half rs controller "$ns"
  sleep 60
  [ "$(identities "$ns")" = "$before" ] || { FAIL="machines changed after the controller swap"; return 0; }
  stop manager; start_half rs manager "$ns"
  sleep 60
  [ "$(identities "$ns")" = "$before" ] || { FAIL="machines changed after the manager swap"; return 0; }
  [ "$(running "$ns" class-a)" = 5 ] || { FAIL="not 5 Running after the swap"; return 0; }
  [ "$(stat create)" = "$creates" ] || { FAIL="VMs created during the swap: $(($(stat create) - creates))"; return 0; }
  [ "$(stat delete)" = "$deletes" ] || { FAIL="VMs deleted during the swap: $(($(stat delete) - deletes))"; return 0; }
  [ "$(cordoned)" = 0 ] || { FAIL="$(cordoned) Nodes cordoned during the swap"; return 0; }
  DETAIL="5 machines kept (names, UIDs, providerIDs), 0 VMs created, 0 deleted, 0 Nodes cordoned"
}

ROWS=""
FAILED=0
for SCENARIO in $SCENARIOS; do
  FAIL=""; DETAIL=""
  say "scenario $SCENARIO ..."
  t=$SECONDS
  "scenario_$SCENARIO"
  stop manager; stop controller
  if [ -z "$FAIL" ]; then
    say "scenario $SCENARIO: PASS in $((SECONDS - t))s: $DETAIL"
    ROWS="$ROWS| \`$SCENARIO\` | PASS | $DETAIL |"$'\n'
  else
    FAILED=$((FAILED + 1))
    say "scenario $SCENARIO: FAIL: $FAIL"
    ROWS="$ROWS| \`$SCENARIO\` | FAIL | $FAIL |"$'\n'
  fi
done

if [ "$REPORT" != none ]; then
  cat > "$REPORT" <<EOF
# mcm-rs next to the real Go halves

Written by \`bash hack/reference-halves.sh\` on $(date -u +%Y-%m-%d) in $((SECONDS - T0)) s (debug build of
mcm-rs; Gardener machine-controller-manager v0.62.1 and its provider library built from the Go
module proxy, $BUILD_REF; 2 cores). What the scenarios are and why:
[docs/design/reference-halves.md](design/reference-halves.md).

| scenario | result | detail |
| --- | --- | --- |
$ROWS
EOF
  say "report written to $REPORT"
fi
[ "$FAILED" = 0 ]
