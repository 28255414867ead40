# tests/lib.sh: the one helper library of the shell tests, sourced by each (BIN set first).
#
# What every test needs once: the models directory (M), a temporary directory (TMP) and the
# servers it started, all cleaned up on exit (servers by PID, never by name); start_server and
# stop_server; HTTP against the current server ($PORT: post, json_get, complete, metric,
# expect_http); and one assertion style. Every result is `check NAME STATUS [DETAIL]` (or its
# two halves `ok NAME` / `fail NAME DETAIL` where the branches are written out), printed as
# "ok   NAME" or "FAIL NAME: DETAIL" (what differed) with the seconds since the start (which
# part of a slow run took the time); `expect_eq NAME GOT WANT` prints both values; `finish
# LABEL` prints "LABEL: N passed, N failed" and fails the script when anything failed or
# nothing ran.
M=${PADDOCK_MODELS:-${PADDOCK_MODELS_DEFAULT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/../shared/models}}
TMP=$(mktemp -d)
# Servers here do not pick up a batch knee measured on this machine (bench --sweep-batch).
export PADDOCK_CACHE_DIR=$TMP/cache
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT

# --- assertions
T_PASS=0
T_FAIL=0
ok() {  # ok NAME
  T_PASS=$((T_PASS + 1))
  echo "ok   $1 [${SECONDS}s]"
}
fail() {  # fail NAME [DETAIL]: DETAIL says what differed
  T_FAIL=$((T_FAIL + 1))
  echo "FAIL $1${2:+: $2} [${SECONDS}s]"
}
check() {  # check NAME STATUS [DETAIL]
  if [ "$2" -eq 0 ]; then ok "$1"; else fail "$1" "${3:-}"; fi
}
expect_eq() {  # expect_eq NAME GOT WANT
  if [ "$2" = "$3" ]; then ok "$1"; else fail "$1" "got '$2', want '$3'"; fi
}
finish() {  # finish LABEL: the totals; the script's status
  echo "$1: $T_PASS passed, $T_FAIL failed"
  [ "$T_FAIL" -eq 0 ] && [ "$T_PASS" -gt 0 ]
}

# --- servers
# start_server NAME ARGS... : starts paddock serve on a free port; sets PORT, U and SPID.
start_server() {
  local name=$1
  shift
  "$BIN" serve --port 0 "$@" 2>"$TMP/$name.log" &
  SPID=$!
  PIDS+=("$SPID")
  wait_ready "$name"
}

# wait_ready NAME: a server started in the background as SPID, logging to $TMP/NAME.log,
# answers /health with 200 on the port it logged; sets PORT and U (fails if it ended first).
wait_ready() {
  local name=$1
  PORT=""
  for _ in $(seq 1 600); do
    PORT=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$TMP/$name.log" | head -n 1)
    if [ -n "$PORT" ] && curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health" | grep -q 200; then
      U="http://127.0.0.1:$PORT"
      return 0
    fi
    kill -0 "$SPID" 2>/dev/null || break
    sleep 0.1
  done
  echo "server $name did not become ready:"
  cat "$TMP/$name.log"
  return 1
}

# stop_server PID: SIGTERM, then wait for it (a server drains and writes its queues first);
# returns its exit status.
stop_server() {
  kill -TERM "$1" 2>/dev/null
  wait "$1" 2>/dev/null
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

# --- HTTP against the current server ($PORT)
post() {  # post PATH BODY -> prints "STATUS BODY"
  curl -s -o "$TMP/body" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary "$2" "http://127.0.0.1:$PORT$1"
  echo " $(cat "$TMP/body")"
}

json_get() {  # json_get EXPR < JSON: EXPR over d, the parsed document
  python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"
}

complete() {  # complete MODEL PROMPT N -> the greedy completion's text (MODEL "": the default)
  local model=""
  [ -n "$1" ] && model="\"model\":\"$1\","
  curl -s -H 'Content-Type: application/json' --data-binary \
    "{$model\"prompt\":\"$2\",\"max_tokens\":$3,\"temperature\":0}" \
    "http://127.0.0.1:$PORT/v1/completions" | json_get 'd["choices"][0]["text"]'
}

metric() {  # metric NAME [MODEL] -> the series' value (0 when absent)
  local sel="$1"
  [ -n "${2:-}" ] && sel="$1{model_name=\"$2\"}"
  curl -s "http://127.0.0.1:$PORT/metrics" |
    awk -v n="$sel" '($1 == n || (index(n, "{") == 0 && index($1, n "{") == 1)) && !f {print $2; f=1} END {if (!f) print 0}'
}

expect_http() {  # expect_http NAME PATH BODY STATUS TEXT: the answer's status, TEXT in its body
  local r
  r=$(post "$2" "$3")
  if [ "${r%% *}" = "$4" ] && echo "${r#* }" | grep -q -- "$5"; then
    ok "$1"
  else
    fail "$1" "got $(echo "$r" | head -c 300), want $4 with '$5'"
  fi
}
