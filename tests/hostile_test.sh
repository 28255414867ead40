#!/usr/bin/env bash
# The hostile-input suite (tests/server/hostile.mjs) against `paddock serve` on stories260K:
# one server with short deadlines for every attack, and one with a small connection cap.
# usage: hostile_test.sh PADDOCK_BIN
set -uo pipefail
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/server_lib.sh"

rc=0
start_server main -m "$M/stories260K.gguf" --header-timeout 3 --body-timeout 5 --idle-timeout 5 || exit 1
node "$HERE/server/hostile.mjs" "$PORT" "$SPID" || rc=1
kill -TERM "$SPID"
wait "$SPID" || { echo "FAIL hostile: the server did not exit 0 after the suite"; rc=1; }

start_server cap -m "$M/stories260K.gguf" --max-connections 50 --header-timeout 3 || exit 1
node "$HERE/server/hostile.mjs" "$PORT" "$SPID" --only connection-cap --cap 50 || rc=1
kill -TERM "$SPID"
wait "$SPID" || rc=1
exit $rc
