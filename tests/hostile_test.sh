#!/usr/bin/env bash
# The hostile-input suite (tests/server/hostile.mjs) against `paddock serve` on stories260K:
# one server with short deadlines for every attack, and one with a small connection cap.
# usage: hostile_test.sh PADDOCK_BIN
set -uo pipefail
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
M=${PADDOCK_MODELS:-${PADDOCK_MODELS_DEFAULT:-$HERE/../../shared/models}}
TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT

start_server() {  # start_server NAME ARGS... : sets PORT and SPID
  local name=$1
  shift
  "$BIN" serve --port 0 -m "$M/stories260K.gguf" "$@" 2>"$TMP/$name.log" &
  SPID=$!
  PIDS+=("$SPID")
  PORT=""
  for _ in $(seq 1 600); do
    PORT=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$TMP/$name.log" | head -n 1)
    if [ -n "$PORT" ] && curl -s "http://127.0.0.1:$PORT/health" | grep -q ok; then return 0; fi
    kill -0 "$SPID" 2>/dev/null || break
    sleep 0.1
  done
  echo "server $name did not become ready:"
  cat "$TMP/$name.log"
  return 1
}

rc=0
start_server main --header-timeout 3 --body-timeout 5 --idle-timeout 5 || exit 1
node "$HERE/server/hostile.mjs" "$PORT" "$SPID" || rc=1
kill -TERM "$SPID"
wait "$SPID" || { echo "FAIL hostile: the server did not exit 0 after the suite"; rc=1; }

start_server cap --max-connections 50 --header-timeout 3 || exit 1
node "$HERE/server/hostile.mjs" "$PORT" "$SPID" --only connection-cap --cap 50 || rc=1
kill -TERM "$SPID"
wait "$SPID" || rc=1
exit $rc
