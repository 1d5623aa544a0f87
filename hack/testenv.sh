#!/usr/bin/env bash
# The test control plane: etcd, kube-apiserver and kube-controller-manager on
# loopback, built from the Go module proxy (hack/build-control-plane.sh).
#
#   hack/testenv.sh up     builds if needed, starts, waits for /readyz, writes
#                          $MCM_TESTENV_DIR/kubeconfig and $MCM_TESTENV_DIR/env
#   hack/testenv.sh down   stops the processes it started, by PID
#   hack/testenv.sh status prints whether the control plane answers
#
# MCM_TESTENV_DIR defaults to <repo>/.mcm/testenv; logs are kept in its logs/
# folder; etcd's data lives on tmpfs (/dev/shm).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${MCM_TESTENV_DIR:-$ROOT/.mcm/testenv}
log() { echo "[testenv] $*" >&2; }

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1]);s.close()'; }

stop() {
  local f pid
  for f in kube-controller-manager kube-apiserver etcd; do
    [ -f "$DIR/$f.pid" ] || continue
    pid=$(cat "$DIR/$f.pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      log "stopped $f (pid $pid)"
    fi
    rm -f "$DIR/$f.pid"
  done
  if [ -f "$DIR/data-dir" ]; then rm -rf "$(cat "$DIR/data-dir")"; rm -f "$DIR/data-dir"; fi
}

wait_for() { # what url timeout-seconds curl-args...
  local what=$1 url=$2 limit=$3; shift 3
  local t0=$SECONDS
  until curl -sf "$@" "$url" >/dev/null 2>&1; do
    if [ $((SECONDS - t0)) -ge "$limit" ]; then
      log "$what did not become ready within ${limit}s; last log lines:"
      tail -n 30 "$DIR/logs/$what.log" >&2 || true
      return 1
    fi
    sleep 0.5
  done
}

up() {
  stop
  local bin
  bin=$("$ROOT/hack/build-control-plane.sh" | tail -n 1)
  mkdir -p "$DIR/logs"
  local data pki
  data=$(mktemp -d /dev/shm/mcm-testenv.XXXXXX)
  echo "$data" > "$DIR/data-dir"
  pki="$DIR/pki"; mkdir -p "$pki"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 7 \
    -subj /CN=mcm-test-ca -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=kube-apiserver \
    -keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" 2>/dev/null
  openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -days 7 \
    -extfile <(printf 'subjectAltName=IP:127.0.0.1,DNS:localhost') -out "$pki/apiserver.crt" 2>/dev/null
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  local token ep pp ap cp
  token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  echo "$token,admin,admin,system:masters" > "$DIR/tokens.csv"
  ep=$(free_port); pp=$(free_port); ap=$(free_port); cp=$(free_port)
  local t0=$SECONDS
  "$bin/etcd" --data-dir "$data/etcd" --unsafe-no-fsync --log-level warn \
    --listen-client-urls "http://127.0.0.1:$ep" --advertise-client-urls "http://127.0.0.1:$ep" \
    --listen-peer-urls "http://127.0.0.1:$pp" --initial-advertise-peer-urls "http://127.0.0.1:$pp" \
    --initial-cluster "default=http://127.0.0.1:$pp" --listen-metrics-urls "" \
    > "$DIR/logs/etcd.log" 2>&1 &
  echo $! > "$DIR/etcd.pid"
  wait_for etcd "http://127.0.0.1:$ep/health" 60
  "$bin/kube-apiserver" --etcd-servers="http://127.0.0.1:$ep" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$ap" \
    --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
    --token-auth-file="$DIR/tokens.csv" --authorization-mode=Node,RBAC \
    --service-account-issuer="https://127.0.0.1:$ap" \
    --service-account-key-file="$pki/sa.key" --service-account-signing-key-file="$pki/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 --allow-privileged=true \
    --disable-admission-plugins=ServiceAccount --endpoint-reconciler-type=none --profiling=false \
    > "$DIR/logs/kube-apiserver.log" 2>&1 &
  echo $! > "$DIR/kube-apiserver.pid"
  wait_for kube-apiserver "https://127.0.0.1:$ap/readyz" 120 --cacert "$pki/ca.crt" -H "Authorization: Bearer $token"
  local ready_api=$((SECONDS - t0))
  cat > "$DIR/kubeconfig" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: mcm-test
  cluster:
    server: https://127.0.0.1:$ap
    certificate-authority: $pki/ca.crt
users:
- name: admin
  user:
    token: $token
contexts:
- name: mcm-test
  context:
    cluster: mcm-test
    user: admin
current-context: mcm-test
KCFG
  # Garbage collection of owned objects, node lifecycle (Nodes go Unknown when
  # their heartbeats stop), PDB status (disruption), namespace deletion.
  "$bin/kube-controller-manager" --kubeconfig="$DIR/kubeconfig" \
    --authentication-kubeconfig="$DIR/kubeconfig" --authorization-kubeconfig="$DIR/kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$cp" --leader-elect=false \
    --controllers=garbagecollector,nodelifecycle,disruption,namespace,serviceaccount,serviceaccount-token \
    --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
    --node-monitor-period=2s --node-monitor-grace-period=20s --profiling=false \
    > "$DIR/logs/kube-controller-manager.log" 2>&1 &
  echo $! > "$DIR/kube-controller-manager.pid"
  wait_for kube-controller-manager "https://127.0.0.1:$cp/healthz" 60 -k
  cat > "$DIR/env" <<ENV
export KUBECONFIG=$DIR/kubeconfig
export MCM_TESTENV_DIR=$DIR
ENV
  log "control plane ready: kube-apiserver in ${ready_api}s, all in $((SECONDS - t0))s"
  log "kubeconfig: $DIR/kubeconfig   logs: $DIR/logs"
  log "use it: export KUBECONFIG=$DIR/kubeconfig"
}

status() {
  [ -f "$DIR/kubeconfig" ] || { echo "not running (no $DIR/kubeconfig)"; return 1; }
  kubectl --kubeconfig "$DIR/kubeconfig" get --raw /readyz && echo
}

case "${1:-}" in
  up) up ;;
  down) stop ;;
  status) status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
