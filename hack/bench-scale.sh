#!/usr/bin/env bash
# The scale scenario: a benchmark, not a test (never part of `cargo test`).
#
#   bash hack/bench-scale.sh [N]          N machines (default 200) through ONE MachineDeployment
#
# All on loopback, in a throw-away work folder (printed at the start, kept for its logs):
#  1. builds `mcm` (release by default; MCM_BENCH_PROFILE=debug for a debug build) without
#     the AWS provider, starts a SEPARATE control plane (hack/testenv.sh with its own
#     MCM_TESTENV_DIR), installs the CRDs, starts `mcm local-cloud serve` (EC2-like rate
#     limits, the default, plus realistic latency: create 300 ms, status 50 ms, initialize
#     100 ms, delete 200 ms, list 100 ms; simulated kubelets register Ready Nodes) and
#     `mcm run` (no leader election);
#  2. applies examples/machine-class.yaml and examples/machine-deployment.yaml with replicas=N;
#  3. measures the time until all N machines are Running (next to the floor the cloud's rate
#     limits impose), cloud calls per machine by operation (`mcm local-cloud stats`),
#     kube-apiserver requests per machine by verb and resource (`apiserver_request_total`
#     diffed; the benchmark's own polling is subtracted), the controller's peak RSS (VmHWM)
#     and CPU seconds (utime+stime);
#  4. scales to 0 and measures the time until all machines, Nodes and VMs are gone;
#  5. prints a summary and writes it into docs/scale-report.md (a section per N, replaced on
#     a re-run; text outside the section markers is kept).
# Every process it started is stopped by PID on exit, also on failure or Ctrl-C.
# On 2 shared cores N=200 works; at N=1000 the simulated kubelets fall behind (see the report).
#
# Environment:
#   MCM_BENCH_PROFILE   release (default) | debug
#   MCM_BENCH_TUNABLES  JSON merged onto the local cloud's defaults (default: the latencies above)
#   MCM_BENCH_BOOT      boot delay of an instance (default 3s, the local cloud's default)
#   MCM_BENCH_UP_TIMEOUT / MCM_BENCH_DOWN_TIMEOUT   seconds (default 900+3N / 300+2N)
#   MCM_BENCH_IDLE      seconds of steady state measured after scale-up (default 30)
#   MCM_BENCH_POLL      poll period in seconds (default 2)
#   MCM_BENCH_REPORT    the report file (default docs/scale-report.md; "none" = do not write)
#   MCM_BENCH_RUN_ARGS  extra arguments for `mcm run` (default: Gardener's machine-controller
#                       QPS "--kube-api-qps 100 --kube-api-burst 200"; "" = the built-in 20/30)
#   MCM_BENCH_NO_IPV6   1 = the class without IPv6 addresses (IPv4-only Nodes)
#   MCM_BENCH_CLOUD_ARGS extra arguments for `mcm local-cloud serve` (e.g. "--node-status-interval 5m")
#   MCM_BENCH_WORK      the work folder (default: a new /tmp/mcm-bench.XXXXXX)
#   MCM_BENCH_IMPL      mcm-rs (default) | reference: the same N on the same local cloud with the
#                       reference's two halves instead of `mcm run` (Gardener MCM v0.62.1 and its
#                       provider library with our Go driver, hack/build-reference.sh; both get
#                       RUN_ARGS' client rate); CPU and RSS are the two processes' sums; the
#                       report gets a section of its own (`reference N=...`)
#   MCM_BENCH_DRIVER    in-process (default) | grpc: the local driver out of process, as
#                       `mcm driver serve --provider local` on a Unix socket in the work folder,
#                       reached by `mcm run --driver-endpoint local=unix://…` (whose own
#                       --local-cloud-url points nowhere); mcm is built with --features grpc;
#                       CPU and RSS are the two processes' sums; the report gets a section of its
#                       own (`grpc N=...`)
set -euo pipefail
# Everything is in main, which bash parses completely before running it: editing this file
# while a benchmark runs cannot change the running script.
main() {
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

N=${1:-200}
case "$N" in '' | *[!0-9]*) echo "usage: $0 [N]   (N = number of machines, default 200)" >&2; exit 2 ;; esac
[ "$N" -ge 1 ] || { echo "N must be at least 1" >&2; exit 2; }
PROFILE=${MCM_BENCH_PROFILE:-release}
TUNABLES=${MCM_BENCH_TUNABLES:-'{"create":{"latencyMs":300},"status":{"latencyMs":50},"initialize":{"latencyMs":100},"delete":{"latencyMs":200},"list":{"latencyMs":100}}'}
BOOT=${MCM_BENCH_BOOT:-3s}
UP_TIMEOUT=${MCM_BENCH_UP_TIMEOUT:-$((900 + 3 * N))}
DOWN_TIMEOUT=${MCM_BENCH_DOWN_TIMEOUT:-$((300 + 2 * N))}
IDLE=${MCM_BENCH_IDLE:-30}
POLL=${MCM_BENCH_POLL:-2}
REPORT=${MCM_BENCH_REPORT:-$ROOT/docs/scale-report.md}
# The kube client rate of Gardener's machine-controller container (--kube-api-qps=100
# --kube-api-burst=200), what a production installation runs with; the reference's built-in
# default (20/30) makes the API server the bottleneck of any large scale-up (docs/scale-report.md).
RUN_ARGS=${MCM_BENCH_RUN_ARGS---kube-api-qps 100 --kube-api-burst 200}
IMPL=${MCM_BENCH_IMPL:-mcm-rs}
case "$IMPL" in mcm-rs|reference) ;; *) echo "MCM_BENCH_IMPL must be mcm-rs or reference" >&2; exit 2 ;; esac
DRIVER=${MCM_BENCH_DRIVER:-in-process}
case "$DRIVER" in in-process|grpc) ;; *) echo "MCM_BENCH_DRIVER must be in-process or grpc" >&2; exit 2 ;; esac
[ "$DRIVER" = in-process ] || [ "$IMPL" = mcm-rs ] || { echo "MCM_BENCH_DRIVER=grpc needs MCM_BENCH_IMPL=mcm-rs" >&2; exit 2; }
CLOUD_ARGS=${MCM_BENCH_CLOUD_ARGS:-}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/mcm-rs/target}
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
KUBECTL=${KUBECTL:-/usr/bin/kubectl}
CLK_TCK=$(getconf CLK_TCK)
T_START=$SECONDS

LIB_TAG=bench LIB_T0=$T_START
# shellcheck source=hack/lib.sh
source "$ROOT/hack/lib.sh"
for tool in python3 jq curl openssl "$KUBECTL"; do
  command -v "$tool" >/dev/null || die "$tool is required"
done

case "$PROFILE" in
  release) CARGO_PROFILE_ARGS=(--release); PROFILE_DIR=release ;;
  debug) CARGO_PROFILE_ARGS=(); PROFILE_DIR=debug ;;
  *) die "MCM_BENCH_PROFILE must be release or debug" ;;
esac

WORK=${MCM_BENCH_WORK:-$(mktemp -d /tmp/mcm-bench.XXXXXX)}
mkdir -p "$WORK/logs" "$WORK/snap"
ENV_DIR=$WORK/testenv
say "work folder: $WORK (logs in $WORK/logs)"

CLOUD_PID=""
MCM_PID=""
MCM2_PID=""
DRIVER_PID=""
TESTENV_STARTED=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  stop_pid "$MCM_PID" "controllers"
  stop_pid "$MCM2_PID" "reference manager"
  stop_pid "$DRIVER_PID" "driver"
  stop_pid "$CLOUD_PID" "local cloud"
  if [ -n "$TESTENV_STARTED" ]; then
    MCM_TESTENV_DIR=$ENV_DIR bash "$ROOT/hack/testenv.sh" down >/dev/null 2>&1 || true
  fi
  rm -f "$WORK/cloud.redb" "$WORK/mcm"
  say "finished with exit code $rc after $((SECONDS - T_START)) s (logs kept in $WORK/logs)"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------------------
# 1. Build and start everything.

FEATURE_ARGS=(--features local)
[ "$DRIVER" = grpc ] && FEATURE_ARGS=(--features local,grpc)
say "building mcm ($PROFILE, --no-default-features ${FEATURE_ARGS[*]+"${FEATURE_ARGS[*]}"})"
t=$SECONDS
cargo build ${CARGO_PROFILE_ARGS[@]+"${CARGO_PROFILE_ARGS[@]}"} -p mcm --no-default-features \
  ${FEATURE_ARGS[@]+"${FEATURE_ARGS[@]}"} --quiet
BUILD_SECONDS=$((SECONDS - t))
# A private copy: other builds in the shared target folder may replace the binary meanwhile.
cp "$CARGO_TARGET_DIR/$PROFILE_DIR/mcm" "$WORK/mcm"
MCM=$WORK/mcm
say "built in ${BUILD_SECONDS}s: $("$MCM" version)"
if [ "$IMPL" = reference ]; then
  say "building the reference halves (cached by their go.sum)"
  REF_BIN=$(bash "$ROOT/hack/build-reference.sh" | tail -n1)
fi

say "starting a separate control plane (MCM_TESTENV_DIR=$ENV_DIR)"
TESTENV_STARTED=1
MCM_TESTENV_DIR=$ENV_DIR bash "$ROOT/hack/testenv.sh" up 2> "$WORK/logs/testenv-up.log" \
  || { cat "$WORK/logs/testenv-up.log" >&2; die "hack/testenv.sh up"; }
KC=$ENV_DIR/kubeconfig
k() { "$KUBECTL" --kubeconfig "$KC" --cache-dir "$WORK/kube-cache" --request-timeout 60s "$@"; }
API_SERVER=$(k config view --raw -o jsonpath='{.clusters[0].cluster.server}')
API_CA=$(k config view --raw -o jsonpath='{.clusters[0].cluster.certificate-authority}')
API_TOKEN=$(k config view --raw -o jsonpath='{.users[0].user.token}')
APISERVER_PID=$(cat "$ENV_DIR/kube-apiserver.pid")

say "installing the CRDs"
"$MCM" crds | k apply --server-side -f - >/dev/null
k wait --for condition=established --timeout=60s \
  crd/machines.machine.sapcloud.io crd/machinesets.machine.sapcloud.io \
  crd/machinedeployments.machine.sapcloud.io crd/machineclasses.machine.sapcloud.io >/dev/null

CLOUD_PORT=$(free_port)
CLOUD_URL=http://127.0.0.1:$CLOUD_PORT
printf '%s\n' "$TUNABLES" > "$WORK/tunables.json"
jq -e . "$WORK/tunables.json" >/dev/null || die "MCM_BENCH_TUNABLES is not JSON"
say "starting the local cloud on $CLOUD_URL (tunables: $TUNABLES, boot delay $BOOT)"
# shellcheck disable=SC2086
NO_COLOR=1 "$MCM" local-cloud serve --port "$CLOUD_PORT" --store "$WORK/cloud.redb" \
  --target-kubeconfig "$KC" --config "$WORK/tunables.json" --boot-delay "$BOOT" $CLOUD_ARGS \
  > "$WORK/logs/local-cloud.log" 2>&1 &
CLOUD_PID=$!
for i in $(seq 1 100); do
  curl -sf "$CLOUD_URL/admin/stats" >/dev/null 2>&1 && break
  kill -0 "$CLOUD_PID" 2>/dev/null || { tail -n 20 "$WORK/logs/local-cloud.log" >&2; die "the local cloud exited"; }
  [ "$i" -lt 100 ] || die "the local cloud did not answer within 20 s"
  sleep 0.2
done
"$MCM" local-cloud faults --local-cloud-url "$CLOUD_URL" > "$WORK/tunables-effective.json"

METRICS_PORT=$(free_port)
if [ "$IMPL" = reference ]; then
  METRICS_PORT2=$(free_port)
  say "starting the reference's halves (machine-controller on 127.0.0.1:$METRICS_PORT, manager on :$METRICS_PORT2)"
  # shellcheck disable=SC2086
  "$REF_BIN/machine-controller-local" --leader-elect=false --port "$METRICS_PORT" \
    --control-kubeconfig "$KC" --target-kubeconfig "$KC" --namespace default \
    --local-cloud-url "$CLOUD_URL" $RUN_ARGS > "$WORK/logs/mcm.log" 2>&1 &
  MCM_PID=$!
  # shellcheck disable=SC2086
  "$REF_BIN/machine-controller-manager" --leader-elect=false --port "$METRICS_PORT2" \
    --control-kubeconfig "$KC" --target-kubeconfig "$KC" --namespace default \
    $RUN_ARGS > "$WORK/logs/mcm-manager.log" 2>&1 &
  MCM2_PID=$!
else
  DRIVER_ARGS=(--local-cloud-url "$CLOUD_URL")
  if [ "$DRIVER" = grpc ]; then
    SOCKET=$WORK/driver/local.sock
    say "starting the local driver out of process (mcm driver serve on unix://$SOCKET)"
    NO_COLOR=1 RUST_LOG=${RUST_LOG:-info} "$MCM" driver serve --provider local \
      --listen "unix://$SOCKET" --local-cloud-url "$CLOUD_URL" \
      > "$WORK/logs/driver.log" 2>&1 &
    DRIVER_PID=$!
    for i in $(seq 1 100); do
      [ -S "$SOCKET" ] && break
      kill -0 "$DRIVER_PID" 2>/dev/null || { tail -n 20 "$WORK/logs/driver.log" >&2; die "the driver exited"; }
      [ "$i" -lt 100 ] || die "the driver's socket did not appear within 20 s"
      sleep 0.2
    done
    # The controllers reach the cloud only through the driver.
    DRIVER_ARGS=(--local-cloud-url "http://127.0.0.1:1" --driver-endpoint "local=unix://$SOCKET")
  fi
  say "starting the controllers (mcm run, metrics on 127.0.0.1:$METRICS_PORT)"
  # shellcheck disable=SC2086
  NO_COLOR=1 RUST_LOG=${RUST_LOG:-info,kube=warn,hyper=warn} "$MCM" run --leader-elect=false \
    --address 127.0.0.1 --port "$METRICS_PORT" \
    --control-kubeconfig "$KC" --target-kubeconfig "$KC" --namespace default \
    "${DRIVER_ARGS[@]}" $RUN_ARGS \
    > "$WORK/logs/mcm.log" 2>&1 &
  MCM_PID=$!
fi
for i in $(seq 1 150); do
  curl -sf "http://127.0.0.1:$METRICS_PORT/healthz" >/dev/null 2>&1 && break
  kill -0 "$MCM_PID" 2>/dev/null || { tail -n 20 "$WORK/logs/mcm.log" >&2; die "the controllers exited"; }
  [ "$i" -lt 150 ] || die "the controllers did not answer /healthz within 30 s"
  sleep 0.2
done

# ---------------------------------------------------------------------------
# Measuring helpers.

# kube-apiserver's request counters, one "verb group resource subresource count" line each.
api_snapshot() { # file
  curl -sf --max-time 30 --cacert "$API_CA" -H "Authorization: Bearer $API_TOKEN" "$API_SERVER/metrics" \
    | python3 -c '
import re, sys, collections
acc = collections.Counter()
for line in sys.stdin:
    if not line.startswith("apiserver_request_total{"):
        continue
    labels, value = line.rsplit(" ", 1)
    l = dict(re.findall(r"(\w+)=\"([^\"]*)\"", labels))
    if not l.get("resource"):
        continue  # non-resource requests: /metrics, /readyz, discovery
    key = (l.get("verb", ""), l.get("group", "") or "core", l.get("resource", ""), l.get("subresource", "") or "-")
    acc[key] += float(value)
for k, v in sorted(acc.items()):
    print(*k, int(v))
' > "$1"
}
cloud_snapshot() { "$MCM" local-cloud stats --local-cloud-url "$CLOUD_URL" > "$1"; }
proc_snapshot() { # file pid...: "utime+stime seconds, VmHWM kB, VmRSS kB", summed over the pids
  local out=$1; shift
  python3 - "$CLK_TCK" "$@" > "$out" <<'PY'
import sys
tck, total = int(sys.argv[1]), [0.0, 0, 0]
for pid in sys.argv[2:]:
    try:
        stat = open(f"/proc/{pid}/stat").read()
        f = stat[stat.rindex(")") + 2:].split()
        total[0] += (int(f[11]) + int(f[12])) / tck  # fields 14 and 15: utime, stime
        st = dict(l.split(":", 1) for l in open(f"/proc/{pid}/status") if ":" in l)
        kb = lambda k: int(st[k].split()[0]) if k in st else 0
        total[1] += kb('VmHWM'); total[2] += kb('VmRSS')
    except FileNotFoundError:
        pass
print(f"{total[0]:.2f} {total[1]} {total[2]}")
PY
}
snapshot_all() { # name
  api_snapshot "$WORK/snap/$1.api"
  cloud_snapshot "$WORK/snap/$1.cloud.json"
  # shellcheck disable=SC2086
  proc_snapshot "$WORK/snap/$1.mcm.proc" "$MCM_PID" $MCM2_PID $DRIVER_PID
  proc_snapshot "$WORK/snap/$1.cloud.proc" "$CLOUD_PID"
  proc_snapshot "$WORK/snap/$1.apiserver.proc" "$APISERVER_PID"
  { curl -sf --max-time 30 "http://127.0.0.1:$METRICS_PORT/metrics" || true
    [ -z "$MCM2_PID" ] || curl -sf --max-time 30 "http://127.0.0.1:$METRICS_PORT2/metrics" || true
  } > "$WORK/snap/$1.mcm.metrics"
  date +%s.%N > "$WORK/snap/$1.time"
}

# Our own requests to kube-apiserver, subtracted from the counters.
OWN_LIST_MACHINES=0
OWN_LIST_NODES=0
# (These run in subshells: the callers count the LISTs.)
machines_json() { k get --raw "/apis/machine.sapcloud.io/v1alpha1/namespaces/default/machines"; }
nodes_json() { k get --raw "/api/v1/nodes"; }
# "total running deleting phase-summary" of the machines.
machine_counts() {
  machines_json | jq -r '
    [.items[]] as $m
    | [$m[] | (.status.currentStatus.phase // "") | if . == "" then "(new)" else . end] as $p
    | [($m | length), ([$p[] | select(. == "Running")] | length),
       ([$m[] | select(.metadata.deletionTimestamp != null)] | length),
       ($p | group_by(.) | map("\(.[0])=\(length)") | join(",") | if . == "" then "-" else . end)]
    | @tsv'
}
ready_nodes() {
  nodes_json | jq '[.items[] | select(any(.status.conditions[]?; .type == "Ready" and .status == "True"))] | length'
}
cloud_instances() { curl -sf --max-time 10 "$CLOUD_URL/admin/stats" | jq '[.instancesByState[]] | add // 0'; }
mcd_available() {
  k get --raw /apis/machine.sapcloud.io/v1alpha1/namespaces/default/machinedeployments/local-machine-deployment \
    | jq -r '.status.availableReplicas // 0' 2>/dev/null || true
}

# ---------------------------------------------------------------------------
# 2. Apply the class and the MachineDeployment.

CLASS_NOTE="examples/machine-class.yaml"
cp examples/machine-class.yaml "$WORK/machine-class.yaml"
if [ "${MCM_BENCH_NO_IPV6:-}" = 1 ]; then
  # IPv4-only nodes: one InternalIP per Node (see docs/scale-report.md on dual-stack Nodes).
  sed -i -E 's/^  ipv6AddressCount: [0-9]+/  ipv6AddressCount: 0/' "$WORK/machine-class.yaml"
  grep -q '^  ipv6AddressCount: 0' "$WORK/machine-class.yaml" || die "could not set ipv6AddressCount"
  CLASS_NOTE="examples/machine-class.yaml with ipv6AddressCount: 0 (MCM_BENCH_NO_IPV6=1)"
fi
say "applying $CLASS_NOTE"
k apply -f "$WORK/machine-class.yaml" >/dev/null
sed -E "s/^  replicas: [0-9]+$/  replicas: $N/" examples/machine-deployment.yaml > "$WORK/machine-deployment.yaml"
grep -q "^  replicas: $N\$" "$WORK/machine-deployment.yaml" || die "could not set replicas in the MachineDeployment"
sleep 2
snapshot_all before
OWN_LIST_MACHINES=0
OWN_LIST_NODES=0
OWN_GET_MCD=0
say "applying a MachineDeployment with $N replicas"
T0=$(date +%s.%N)
k apply -f "$WORK/machine-deployment.yaml" >/dev/null
now() { python3 -c "import time; print(f'{time.time() - $1:.1f}')"; }

# ---------------------------------------------------------------------------
# 3. Scale up: wait for N Running machines.

UP_STATUS=ok
T_FIRST_RUNNING=""
T_ALL_VMS=""
T_ALL_RUNNING=""
T_MCD_AVAILABLE=""
last=""
: > "$WORK/timeline-up.txt"
deadline=$((SECONDS + UP_TIMEOUT))
while :; do
  if ! kill -0 "$MCM_PID" 2>/dev/null; then tail -n 30 "$WORK/logs/mcm.log" >&2; die "mcm run exited during scale-up"; fi
  if [ -n "$DRIVER_PID" ] && ! kill -0 "$DRIVER_PID" 2>/dev/null; then tail -n 30 "$WORK/logs/driver.log" >&2; die "the driver exited during scale-up"; fi
  IFS=$'\t' read -r total running deleting phases < <(machine_counts || printf '0\t0\t0\terror\n')
  OWN_LIST_MACHINES=$((OWN_LIST_MACHINES + 1))
  vms=$(cloud_instances || echo "?")
  el=$(now "$T0")
  [ -z "$T_FIRST_RUNNING" ] && [ "$running" -ge 1 ] && T_FIRST_RUNNING=$el
  [ -z "$T_ALL_VMS" ] && [ "$vms" = "$N" ] && T_ALL_VMS=$el
  line="machines=$total running=$running vms=$vms phases=$phases"
  if [ "$line" != "$last" ]; then
    printf '%7ss %s\n' "$el" "$line" | tee -a "$WORK/timeline-up.txt" >&2
    last=$line
  fi
  if [ "$running" -ge "$N" ] && [ "$total" -eq "$N" ]; then T_ALL_RUNNING=$el; break; fi
  if [ "$SECONDS" -ge "$deadline" ]; then UP_STATUS="TIMEOUT after ${UP_TIMEOUT}s ($line)"; say "$UP_STATUS"; break; fi
  sleep "$POLL"
done
# The MachineDeployment's status catching up (bounded: 120 s).
for _ in $(seq 1 120); do
  a=$(mcd_available)
  OWN_GET_MCD=$((OWN_GET_MCD + 1))
  if [ "${a:-0}" = "$N" ]; then T_MCD_AVAILABLE=$(now "$T0"); break; fi
  sleep 1
done
READY_NODES=$(ready_nodes || echo "?")
OWN_LIST_NODES=$((OWN_LIST_NODES + 1))
snapshot_all up
OWN_UP_LIST_MACHINES=$OWN_LIST_MACHINES
OWN_UP_LIST_NODES=$OWN_LIST_NODES
OWN_UP_GET_MCD=$OWN_GET_MCD
say "scale-up: all Running after ${T_ALL_RUNNING:-n/a}s; Ready nodes: $READY_NODES; MachineDeployment available: ${T_MCD_AVAILABLE:-n/a}s"

say "steady state: measuring ${IDLE}s without changes"
sleep "$IDLE"
snapshot_all idle

# ---------------------------------------------------------------------------
# 4. Scale down to 0.

OWN_LIST_MACHINES=0
OWN_LIST_NODES=0
say "scaling the MachineDeployment to 0"
T1=$(date +%s.%N)
k patch mcd local-machine-deployment --type merge -p '{"spec":{"replicas":0}}' >/dev/null
DOWN_STATUS=ok
T_MACHINES_GONE=""
T_VMS_GONE=""
T_NODES_GONE=""
last=""
: > "$WORK/timeline-down.txt"
deadline=$((SECONDS + DOWN_TIMEOUT))
while :; do
  if ! kill -0 "$MCM_PID" 2>/dev/null; then tail -n 30 "$WORK/logs/mcm.log" >&2; die "mcm run exited during scale-down"; fi
  if [ -n "$DRIVER_PID" ] && ! kill -0 "$DRIVER_PID" 2>/dev/null; then tail -n 30 "$WORK/logs/driver.log" >&2; die "the driver exited during scale-down"; fi
  IFS=$'\t' read -r total running deleting phases < <(machine_counts || printf '?\t?\t?\terror\n')
  OWN_LIST_MACHINES=$((OWN_LIST_MACHINES + 1))
  vms=$(cloud_instances || echo "?")
  el=$(now "$T1")
  [ -z "$T_MACHINES_GONE" ] && [ "$total" = "0" ] && T_MACHINES_GONE=$el
  [ -z "$T_VMS_GONE" ] && [ "$vms" = "0" ] && T_VMS_GONE=$el
  line="machines=$total deleting=$deleting vms=$vms phases=$phases"
  if [ "$line" != "$last" ]; then
    printf '%7ss %s\n' "$el" "$line" | tee -a "$WORK/timeline-down.txt" >&2
    last=$line
  fi
  if [ -n "$T_MACHINES_GONE" ] && [ -n "$T_VMS_GONE" ]; then break; fi
  if [ "$SECONDS" -ge "$deadline" ]; then DOWN_STATUS="TIMEOUT after ${DOWN_TIMEOUT}s ($line)"; say "$DOWN_STATUS"; break; fi
  sleep "$POLL"
done
deadline=$((SECONDS + 120))
while [ "$SECONDS" -lt "$deadline" ]; do
  n=$(nodes_json | jq '.items | length' || echo "?")
  OWN_LIST_NODES=$((OWN_LIST_NODES + 1))
  if [ "$n" = "0" ]; then T_NODES_GONE=$(now "$T1"); break; fi
  sleep "$POLL"
done
snapshot_all down
# Every Event of the run (their TTL outlives it): reasons and counts for the report.
k get events -A -o json > "$WORK/snap/events.json" 2>/dev/null || true
OWN_DOWN_LIST_MACHINES=$OWN_LIST_MACHINES
OWN_DOWN_LIST_NODES=$OWN_LIST_NODES
say "scale-down: machines gone after ${T_MACHINES_GONE:-n/a}s, VMs after ${T_VMS_GONE:-n/a}s, Nodes after ${T_NODES_GONE:-n/a}s"

# ---------------------------------------------------------------------------
# 5. The summary.

sed -E 's/\x1b\[[0-9;]*m//g' "$WORK/logs/mcm.log" > "$WORK/logs/mcm.plain.log"
# klog lines (W… warning, E… error); `mcm run` writes them by default.
LOG_WARN=$(grep -cE '^W[0-9]{4} ' "$WORK/logs/mcm.plain.log" || true)
LOG_ERROR=$(grep -cE '^E[0-9]{4} ' "$WORK/logs/mcm.plain.log" || true)
LOG_TOP=$(grep -E '^[WE][0-9]{4} ' "$WORK/logs/mcm.plain.log" \
  | sed -E 's/^[WE][0-9]{4} [^]]*\] //; s/machine=[^ ]*//g; s/(name|key|instance|provider_id|node)=[^ ]*//g; s/"[^"]*"/"…"/g; s/i-[0-9a-f]{17}/i-…/g' \
  | cut -c1-160 | sort | uniq -c | sort -rn | head -n 8 || true)

SUMMARY=$WORK/summary.md
SUMMARY_VARS="N PROFILE BOOT TUNABLES WORK UP_STATUS DOWN_STATUS T_FIRST_RUNNING T_ALL_VMS T_ALL_RUNNING
  T_MCD_AVAILABLE T_MACHINES_GONE T_VMS_GONE T_NODES_GONE READY_NODES IDLE BUILD_SECONDS
  OWN_UP_LIST_MACHINES OWN_UP_LIST_NODES OWN_UP_GET_MCD OWN_DOWN_LIST_MACHINES OWN_DOWN_LIST_NODES
  LOG_WARN LOG_ERROR LOG_TOP RUN_ARGS CLOUD_ARGS CLASS_NOTE IMPL DRIVER"
# The inputs of the summary, to regenerate it from the work folder later.
for v in $SUMMARY_VARS; do printf '%s=%q\n' "$v" "${!v}"; done > "$WORK/summary.env"
# shellcheck disable=SC2086
export $SUMMARY_VARS
python3 - > "$SUMMARY" <<'PY'
import json, os, re, collections, datetime, platform
E = os.environ
W = E["WORK"]; S = W + "/snap/"
N = int(E["N"])

def api(name):
    c = collections.Counter()
    for line in open(S + name + ".api"):
        verb, group, res, sub, v = line.split()
        c[(verb, group, res, sub)] = int(v)
    return c
def cloud(name): return json.load(open(S + name + ".cloud.json"))
def proc(name, who):
    cpu, hwm, rss = open(S + f"{name}.{who}.proc").read().split()
    return float(cpu), int(hwm), int(rss)
def t(name): return float(open(S + name + ".time").read())
def f(x, d=1):
    return "n/a" if x in (None, "") else f"{float(x):.{d}f}"

tun = json.load(open(W + "/tunables-effective.json"))
def floor(op, n):
    rl = tun[op].get("rateLimit")
    if not rl: return 0.0
    return max(0, n - rl["capacity"]) / rl["refillPerSecond"]
def rl(op):
    r = tun[op].get("rateLimit")
    return f"{r['capacity']} burst, {r['refillPerSecond']:g}/s" if r else "unlimited"
lat = {op: tun[op]["latencyMs"] for op in ("create", "initialize", "delete", "status", "list")}
boot = tun["bootDelayMs"] / 1000
floor_up = max(floor("create", N), floor("initialize", N)) + (lat["create"] + lat["initialize"]) / 1000 + boot
floor_down = floor("delete", N) + lat["delete"] / 1000

def diff(a, b):
    d = collections.Counter(b); d.subtract(a)
    return {k: v for k, v in d.items() if v}
up_api = diff(api("before"), api("up"))
idle_api = diff(api("up"), api("idle"))
down_api = diff(api("idle"), api("down"))
# subtract the benchmark's own polling
LM, LN, GD = ("LIST", "machine.sapcloud.io", "machines", "-"), ("LIST", "core", "nodes", "-"), ("GET", "machine.sapcloud.io", "machinedeployments", "-")
for d, own_counts in ((up_api, ((LM, "OWN_UP_LIST_MACHINES"), (LN, "OWN_UP_LIST_NODES"), (GD, "OWN_UP_GET_MCD"))),
                      (down_api, ((LM, "OWN_DOWN_LIST_MACHINES"), (LN, "OWN_DOWN_LIST_NODES")))):
    for key, var in own_counts:
        own = int(E[var])
        if key in d:
            d[key] -= own
            if d[key] <= 0: del d[key]

def ops(a, b):
    out = {}
    for op in ("create", "initialize", "status", "list", "delete"):
        x = a["operations"].get(op, {}); y = b["operations"].get(op, {})
        out[op] = {k: y.get(k, 0) - x.get(k, 0) for k in ("calls", "ok", "throttled", "injectedFaults")}
    return out
up_cloud = ops(cloud("before"), cloud("up"))
idle_cloud = ops(cloud("up"), cloud("idle"))
down_cloud = ops(cloud("idle"), cloud("down"))

mcm = {s: proc(s, "mcm") for s in ("before", "up", "idle", "down")}
cl = {s: proc(s, "cloud") for s in ("before", "up", "idle", "down")}
aps = {s: proc(s, "apiserver") for s in ("before", "up", "idle", "down")}
up_s = t("up") - t("before"); idle_s = t("idle") - t("up"); down_s = t("down") - t("idle")

o = []
p = o.append
date = datetime.datetime.fromtimestamp(t("before"), datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")  # the run's start
REF = E.get("IMPL") == "reference"
GRPC = E.get("DRIVER") == "grpc"
CTL = "the reference's two halves" if REF else "`mcm run`"
p(f"## N = {N}, the reference's halves (Gardener MCM v0.62.1)" if REF
  else f"## N = {N}, the local driver out of process (`mcm driver serve`, gRPC over a Unix socket)" if GRPC
  else f"## N = {N}")
p("")
p(f"{date}; `{'MCM_BENCH_IMPL=reference ' if REF else ''}{'MCM_BENCH_DRIVER=grpc ' if GRPC else ''}bash hack/bench-scale.sh {N}`; "
  f"mcm build profile: **{E['PROFILE']}** (`--no-default-features --features local{',grpc' if GRPC else ''}`); "
  f"machine: 2 cores ({os.cpu_count()} visible, shared with other work), {platform.machine()}; "
  f"one MachineDeployment of {N} replicas (maxSurge 1, maxUnavailable 0) on the `local` provider, class from {E['CLASS_NOTE']}; "
  + (f"the reference's machine-controller-manager v0.62.1 and machine-controller (its provider library with our Go driver for the local cloud), each with defaults{(' + ' + E['RUN_ARGS']) if E['RUN_ARGS'] else ''}; " if REF else
     f"`mcm run` with defaults{(' + ' + E['RUN_ARGS']) if E['RUN_ARGS'] else ''} (concurrent syncs 50 unless overridden); ")
  +
  f"boot delay {boot:g} s; simulated kubelets renew their Lease every 10 s"
  + (f"; local cloud started with `{E['CLOUD_ARGS']}`" if E.get('CLOUD_ARGS') else " and apply the Node status every 10 s") + ".")
p("")
p("Local cloud: " + "; ".join(f"{op} {rl(op)}, {lat[op]} ms" for op in ("create", "initialize", "status", "list", "delete")) + ".")
p("")
p("| scale-up | figure |")
p("| --- | --- |")
p(f"| result | {E['UP_STATUS']} |")
p(f"| first machine Running | {f(E['T_FIRST_RUNNING'])} s |")
p(f"| all {N} VMs exist in the cloud | {f(E['T_ALL_VMS'])} s |")
p(f"| **all {N} machines Running** | **{f(E['T_ALL_RUNNING'])} s** |")
p(f"| MachineDeployment availableReplicas = {N} | {f(E['T_MCD_AVAILABLE'])} s |")
p(f"| floor from the rate limits: create ({N}-{tun['create']['rateLimit']['capacity'] if tun['create'].get('rateLimit') else 0})/refill + latencies + boot | {floor_up:.1f} s |")
try:
    p(f"| ratio to the floor | {float(E['T_ALL_RUNNING']) / floor_up:.2f}x |")
except ValueError:
    pass
p(f"| Ready Nodes at the end | {E['READY_NODES']} |")
p("")
p("| scale-down to 0 | figure |")
p("| --- | --- |")
p(f"| result | {E['DOWN_STATUS']} |")
p(f"| all Machine objects gone | {f(E['T_MACHINES_GONE'])} s |")
p(f"| all VMs gone (cloud instances 0) | {f(E['T_VMS_GONE'])} s |")
p(f"| all Nodes gone | {f(E['T_NODES_GONE'])} s |")
p(f"| floor from the rate limits: delete ({N}-{tun['delete']['rateLimit']['capacity'] if tun['delete'].get('rateLimit') else 0})/refill + latency | {floor_down:.1f} s |")
p("")
p("Cloud calls (from `mcm local-cloud stats`), per machine: calls (throttled)")
p("")
p("| operation | scale-up total | per machine | idle " + f"{idle_s:.0f} s | scale-down total | per machine |")
p("| --- | --- | --- | --- | --- | --- |")
for op in ("create", "initialize", "status", "list", "delete"):
    u, i, d = up_cloud[op], idle_cloud[op], down_cloud[op]
    p(f"| {op} | {u['calls']} ({u['throttled']} throttled) | {u['calls']/N:.2f} ({u['throttled']/N:.2f}) | {i['calls']} "
      f"| {d['calls']} ({d['throttled']} throttled) | {d['calls']/N:.2f} ({d['throttled']/N:.2f}) |")
tot = lambda d: sum(d.values())
p("")
p("kube-apiserver requests (`apiserver_request_total` diffed by verb and resource, the benchmark's own LISTs subtracted; "
  "rows marked (kubelets) come from the local cloud's simulated kubelets, (control plane) from kube-apiserver and "
  "kube-controller-manager; the rest is mostly the controllers, plus the kubelets' node GETs):")
p("")
p(f"| verb | resource | scale-up | per machine | idle {idle_s:.0f} s | scale-down | per machine |")
p("| --- | --- | --- | --- | --- | --- | --- |")
keys = sorted(set(up_api) | set(idle_api) | set(down_api), key=lambda k: -(up_api.get(k, 0) + down_api.get(k, 0)))
def rname(k):
    verb, group, res, sub = k
    r = res if group in ("core",) else f"{res}.{group.split('.')[0]}"
    return r + ("" if sub == "-" else "/" + sub)
def is_kubelet(k):  # the simulated kubelets: server-side apply of leases and node status, node registration
    return (k[0] == "APPLY" and (k[2] == "leases" or (k[2] == "nodes" and k[3] == "status"))) or (k[0] == "POST" and k[2] == "nodes")
def is_control_plane(k):  # kube-apiserver's identity lease, kube-controller-manager (node lifecycle, garbage collector)
    return (k[2] == "leases" and k[0] in ("PUT", "GET", "DELETE")) or (k[2] == "nodes" and k[3] == "status" and k[0] == "PUT")
small = max(5, N // 20)
other = [0, 0, 0, 0]
for k in keys:
    u, i, d = up_api.get(k, 0), idle_api.get(k, 0), down_api.get(k, 0)
    if u + d < small:
        other = [other[0] + u, other[1] + i, other[2] + d, other[3] + 1]
        continue
    mark = " (kubelets)" if is_kubelet(k) else " (control plane)" if is_control_plane(k) else ""
    p(f"| {k[0]} | {rname(k)}{mark} | {u} | {u/N:.2f} | {i} | {d} | {d/N:.2f} |")
if other[3]:
    p(f"| other | {other[3]} kinds with fewer than {small} requests (watches, kubectl) | {other[0]} | {other[0]/N:.2f} | {other[1]} | {other[2]} | {other[2]/N:.2f} |")
p(f"| **all** | | **{tot(up_api)}** | **{tot(up_api)/N:.1f}** | {tot(idle_api)} ({tot(idle_api)/max(idle_s,1):.1f}/s) | **{tot(down_api)}** | **{tot(down_api)/N:.1f}** |")
kub = lambda d: sum(v for k, v in d.items() if is_kubelet(k) or is_control_plane(k))
p(f"| all but the (kubelets) and (control plane) rows (≈ the controllers) | | {tot(up_api)-kub(up_api)} | {(tot(up_api)-kub(up_api))/N:.1f} | {tot(idle_api)-kub(idle_api)} | {tot(down_api)-kub(down_api)} | {(tot(down_api)-kub(down_api))/N:.1f} |")
p("")
p("Processes (CPU = utime+stime; RSS from /proc/<pid>/status):")
p("")
p("| process | CPU scale-up | CPU idle | CPU scale-down | CPU total | peak RSS (VmHWM) | RSS after scale-up |")
p("| --- | --- | --- | --- | --- | --- | --- |")
for name, d in (("reference halves (both processes)" if REF else "mcm run + mcm driver serve (both processes)" if GRPC else "mcm run (controllers)", mcm), ("mcm local-cloud (cloud + kubelets)", cl), ("kube-apiserver", aps)):
    p(f"| {name} | {d['up'][0]-d['before'][0]:.1f} s | {d['idle'][0]-d['up'][0]:.1f} s | {d['down'][0]-d['idle'][0]:.1f} s "
      f"| {d['down'][0]:.1f} s | {d['down'][1]/1024:.0f} MiB | {d['up'][2]/1024:.0f} MiB |")
p("")
m = open(S + "up.mcm.metrics").read() if os.path.exists(S + "up.mcm.metrics") else ""
drv = collections.Counter()
for line in m.splitlines():
    if line.startswith("mcm_cloud_api_driver_request_duration_seconds_count{"):
        op = re.search(r'operation="([^"]*)"', line)
        drv[op.group(1) if op else line] += float(line.rsplit(" ", 1)[1])
if drv:
    p("Driver calls counted by the controller during scale-up (`mcm_cloud_api_driver_request_duration_seconds_count`): "
      + ", ".join(f"{k} {int(v)}" for k, v in sorted(drv.items())) + ".")
    p("")
def scrape(name, series, key):
    """Sums the mcm run samples of `series` in snapshot `name`, by key(line)."""
    c = collections.Counter()
    if not os.path.exists(S + name + ".mcm.metrics"):
        return c
    for line in open(S + name + ".mcm.metrics").read().splitlines():
        if line.startswith(series + "{"):
            c[key(line)] += float(line.rsplit(" ", 1)[1])
    return c
def label(line, name):
    v = re.search(name + r'="([^"]*)"', line)
    return v.group(1) if v else "?"
def rest(name):
    return scrape(name, "rest_client_requests_total", lambda l: label(l, "method"))
rb, ru, rd = rest("before"), rest("up"), rest("down")
ri = rest("idle")
if ru:
    up_total = sum(ru.values()) - sum(rb.values())
    down_total = sum(rd.values()) - sum(ri.values())
    p(f"Requests of the controllers' own kube clients (`rest_client_requests_total` of {CTL}, "
      "diffed; the API-server table above also holds the simulated kubelets' requests): "
      f"scale-up **{int(up_total)}** ({up_total / N:.1f} per machine; "
      + ", ".join(f"{k} {int(ru[k] - rb.get(k, 0))}" for k in sorted(ru)) + "), "
      f"scale-down {int(down_total)} ({down_total / N:.1f} per machine).")
    p("")
def rest_by_url(name):
    path = lambda l: re.sub(r"^[a-z]+://[^/]*", "", label(l, "url"))
    return scrape(name, "rest_client_request_latency_seconds_count", lambda l: (label(l, "verb"), path(l)))
ub, uu, ui, ud = rest_by_url("before"), rest_by_url("up"), rest_by_url("idle"), rest_by_url("down")
if uu:
    rows = sorted(set(uu) | set(ud), key=lambda k: -max(uu.get(k, 0) - ub.get(k, 0), ud.get(k, 0) - ui.get(k, 0)))
    p("The same requests by endpoint (`rest_client_request_latency_seconds_count`, diffed; "
      "`%7B…%7D` are the URL templates' placeholders):")
    p("")
    p("| verb | URL template | scale-up | per machine | scale-down | per machine |")
    p("| --- | --- | --- | --- | --- | --- |")
    for k in rows:
        a, b = uu.get(k, 0) - ub.get(k, 0), ud.get(k, 0) - ui.get(k, 0)
        if a < 1 and b < 1:
            continue
        p(f"| {k[0]} | `{k[1].replace('%7B', '{').replace('%7D', '}')}` | {int(a)} | {a/N:.2f} | {int(b)} | {b/N:.2f} |")
    p("")
try:
    with open(os.path.join(E["WORK"], "snap", "events.json")) as f:
        events = json.load(f).get("items", [])
except (OSError, ValueError):
    events = []
if events:
    by = collections.Counter()
    emitted = collections.Counter()
    for ev in events:
        key = ((ev.get("involvedObject") or {}).get("kind", "?"), ev.get("reason", "?"), ev.get("type", "?"))
        by[key] += 1
        emitted[key] += ev.get("count") or 1
    p("Events of the whole run by object kind and reason (`kubectl get events`; an Event object is one "
      "POST, each repeat of it one PATCH):")
    p("")
    p("| kind | reason | type | Event objects | per machine | emitted (count) |")
    p("| --- | --- | --- | --- | --- | --- |")
    for key, n in sorted(by.items(), key=lambda kv: -kv[1]):
        p(f"| {key[0]} | {key[1]} | {key[2]} | {n} | {n/N:.2f} | {emitted[key]} |")
    p("")
p(f"Controller log: {E['LOG_WARN']} WARN and {E['LOG_ERROR']} ERROR lines; most frequent (identifiers elided):")
p("")
p("```text")
p(E["LOG_TOP"].strip() or "(none)")
p("```")
p("")
import datetime as dt
def stamps(path, needle):
    out = []
    if not os.path.exists(path): return out
    for line in open(path, errors="replace"):
        if needle in line:
            try: out.append((dt.datetime.fromisoformat(line[:26].replace("Z", "")), line))
            except ValueError:
                # A klog line: I1203 15:04:05.123456 (UTC, the year of the run).
                m = re.match(r"^[IWE](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6})", line)
                if m:
                    mo, d, h, mi, s_, us = (int(g) for g in m.groups())
                    out.append((dt.datetime(dt.datetime.utcnow().year, mo, d, h, mi, s_, us), line))
    return out
t_apply = dt.datetime.fromtimestamp(t("before"), dt.timezone.utc).replace(tzinfo=None)
launches = stamps(W + "/logs/local-cloud.log", "instance launched")
if launches:
    buckets = collections.Counter(int(max(0, (x - t_apply).total_seconds()) // 60) for x, _ in launches)
    p("VMs launched per minute after the MachineDeployment was applied (the create bucket allows 120/min after the burst): "
      + ", ".join(str(buckets[b]) for b in range(max(buckets) + 1)) + ".")
    p("")
thr = collections.defaultdict(int)
for _, line in stamps(W + "/logs/mcm.plain.log", "ResourceExhausted"):
    mm = re.search(r"machine=([^ }]+)", line)
    if mm and "provider call failed" in line: thr[mm.group(1)] += 1
if thr:
    v = sorted(thr.values())
    p(f"Throttled provider calls per machine (controller log): {len(v)} of {N} machines throttled at least once; "
      f"median {v[len(v)//2]}, max {v[-1]}.")
    p("")
p(f"Timelines: `{W}/timeline-up.txt`, `{W}/timeline-down.txt`; logs: `{W}/logs/`.")
print("\n".join(o))
PY

echo >&2
cat "$SUMMARY"

if [ "$REPORT" != "none" ]; then
  mkdir -p "$(dirname "$REPORT")"
  python3 - "$REPORT" "$SUMMARY" "$N" "$IMPL" "$DRIVER" <<'PY'
import sys, os
report, summary, n, impl, driver = sys.argv[1:6]
body = open(summary).read().rstrip("\n")
tag = f"N={n}" if impl == "mcm-rs" and driver == "in-process" else "grpc N=" + n if driver == "grpc" else f"{impl} N={n}"
begin, end = f"<!-- bench-scale {tag} begin -->", f"<!-- bench-scale {tag} end -->"
section = f"{begin}\n{body}\n{end}"
if os.path.exists(report):
    text = open(report).read()
else:
    text = ("# Scale report\n\nMeasured with `bash hack/bench-scale.sh [N]` (a benchmark, not a test). "
            "The sections between the `bench-scale` markers are rewritten by the script; the rest is kept.\n")
if begin in text and end in text:
    pre = text[:text.index(begin)]
    post = text[text.index(end) + len(end):]
    text = pre + section + post
else:
    text = text.rstrip("\n") + "\n\n" + section + "\n"
open(report, "w").write(text)
PY
  say "wrote the N=$N section of $REPORT"
fi

[ "$UP_STATUS" = ok ] && [ "$DOWN_STATUS" = ok ] || exit 1
}

main "$@"
