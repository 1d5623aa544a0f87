# shellcheck shell=bash
# Helpers shared by the scenario scripts (hack/chaos.sh, hack/bench-scale.sh,
# hack/reference-halves.sh). Meant to be sourced after setting:
#   LIB_TAG   the prefix of each progress line (e.g. "chaos")
#   LIB_T0    the script's start ($SECONDS); defaults to the moment of sourcing
LIB_T0=${LIB_T0:-$SECONDS}

# A progress line on stderr: "[tag   12s] message".
say() { printf '[%s %5ss] %s\n' "${LIB_TAG:-hack}" "$((SECONDS - LIB_T0))" "$*" >&2; }
die() { say "FAILED: $*"; exit 1; }

# A free TCP port on 127.0.0.1.
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1]);s.close()'; }

# Stops a process we started: wakes it if it was paused (SIGSTOP), asks it to
# stop, and kills it after 10 s; with a name, a kill is reported.
stop_pid() { # pid [name]
  local pid=$1 name=${2:-}
  [ -n "$pid" ] || return 0
  kill -0 "$pid" 2>/dev/null || return 0
  kill -CONT "$pid" 2>/dev/null || true
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    [ -z "$name" ] || say "killed $name (pid $pid)"
  fi
  wait "$pid" 2>/dev/null || true
}

# Runs a check every second until it succeeds; after `seconds` it sets FAIL
# to say what was awaited and returns 1.
wait_for() { # seconds what command...
  local limit=$1 what=$2; shift 2
  local deadline=$((SECONDS + limit))
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || { FAIL="timeout after ${limit}s waiting for $what"; return 1; }
    sleep 1
  done
}
