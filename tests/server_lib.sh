# Shared by the server test scripts (sourced; BIN set by the caller): the models directory, a
# temporary directory and the servers started, all cleaned up on exit, and start_server.
M=${PADDOCK_MODELS:-${PADDOCK_MODELS_DEFAULT:-$(dirname "${BASH_SOURCE[0]}")/../../shared/models}}
TMP=$(mktemp -d)
# Servers here do not pick up a batch knee measured on this machine (bench --sweep-batch).
export PADDOCK_CACHE_DIR=$TMP/cache
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT

# start_server NAME ARGS... : starts paddock serve on a free port; sets PORT and SPID.
start_server() {
  local name=$1
  shift
  "$BIN" serve --port 0 "$@" 2>"$TMP/$name.log" &
  SPID=$!
  PIDS+=("$SPID")
  PORT=""
  for _ in $(seq 1 600); do
    PORT=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$TMP/$name.log" | head -n 1)
    if [ -n "$PORT" ] && curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health" | grep -q 200; then return 0; fi
    kill -0 "$SPID" 2>/dev/null || break
    sleep 0.1
  done
  echo "server $name did not become ready:"
  cat "$TMP/$name.log"
  return 1
}

# wait_first_chunk FILE PID: waits until a streaming client (PID) has written its first
# server-sent event to FILE (the request is in flight), or has ended. Fails if it ended first.
wait_first_chunk() {
  local file=$1 pid=$2
  while ! grep -q '^data: ' "$file" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.02
  done
}

# check NAME STATUS: counts and prints one result (ok / FAIL) with the seconds since the script
# started (which part of a slow run took the time); the caller prints the totals.
pass=0
fail=0
check() {  # check NAME CONDITION-STATUS
  if [ "$2" -eq 0 ]; then
    pass=$((pass + 1))
    echo "ok   $1 [${SECONDS}s]"
  else
    fail=$((fail + 1))
    echo "FAIL $1 [${SECONDS}s]"
  fi
}
