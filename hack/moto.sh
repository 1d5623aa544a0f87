# shellcheck shell=bash
# Local EC2 emulator (moto) for the AWS provider's tests. Meant to be sourced:
#
#   source hack/moto.sh
#   start_moto            # installs moto[server] if needed, starts it on a free port
#   ...                   # tests read MCM_AWS_TEST_ENDPOINT
#   stop_moto
#
# start_moto sets MOTO_PID and exports MCM_AWS_TEST_ENDPOINT=http://127.0.0.1:<port>.
# moto listens on 127.0.0.1 only. Its log goes to $MCM_TESTENV_DIR/logs/moto.log
# (or /tmp/mcm-moto.log when MCM_TESTENV_DIR is unset).

_moto_say() { echo "[moto] $*" >&2; }

_moto_free_port() {
  python3 - <<'PY'
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
PY
}

start_moto() {
  local python=${MOTO_PYTHON:-python3}
  local -a cmd
  if command -v moto_server >/dev/null 2>&1; then
    cmd=(moto_server)
  else
    _moto_say "moto_server not found; installing moto[server] with pip"
    "$python" -m pip install --quiet 'moto[server]' || { _moto_say "pip install failed"; return 1; }
    hash -r
    command -v pyenv >/dev/null 2>&1 && pyenv rehash >/dev/null 2>&1 || true
    if command -v moto_server >/dev/null 2>&1; then
      cmd=(moto_server)
    else
      # The console script may not be on PATH (user site, version managers):
      # the module runs the same server.
      cmd=("$python" -m moto.server)
    fi
  fi
  local log
  if [ -n "${MCM_TESTENV_DIR:-}" ]; then
    mkdir -p "$MCM_TESTENV_DIR/logs"
    log="$MCM_TESTENV_DIR/logs/moto.log"
  else
    log=/tmp/mcm-moto.log
  fi
  local port
  port=$(_moto_free_port) || { _moto_say "no free port"; return 1; }
  "${cmd[@]}" -H 127.0.0.1 -p "$port" >"$log" 2>&1 &
  MOTO_PID=$!
  local url="http://127.0.0.1:$port"
  local i
  for i in $(seq 1 100); do
    if ! kill -0 "$MOTO_PID" 2>/dev/null; then
      _moto_say "moto_server exited during start-up; see $log"
      tail -n 20 "$log" >&2 || true
      MOTO_PID=
      return 1
    fi
    if curl -fsS -o /dev/null "$url/moto-api/" 2>/dev/null \
      || python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=1)" "$url/moto-api/" 2>/dev/null; then
      export MCM_AWS_TEST_ENDPOINT="$url"
      _moto_say "moto_server (pid $MOTO_PID) answers on $url after $((i / 10)).$((i % 10)) s; log: $log"
      return 0
    fi
    sleep 0.1
  done
  _moto_say "moto_server did not answer on $url within 10 s; see $log"
  kill "$MOTO_PID" 2>/dev/null || true
  MOTO_PID=
  return 1
}

stop_moto() {
  if [ -n "${MOTO_PID:-}" ]; then
    kill "$MOTO_PID" 2>/dev/null || true
    wait "$MOTO_PID" 2>/dev/null || true
    MOTO_PID=
  fi
  unset MCM_AWS_TEST_ENDPOINT
}
