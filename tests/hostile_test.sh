#!/usr/bin/env bash
# The hostile-input suite (tests/server/hostile.mjs) against `paddock serve` on stories260K:
# one server with short deadlines for every attack, and one with a small connection cap.
# usage: hostile_test.sh PADDOCK_BIN
set -uo pipefail
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"

start_server main -m "$M/stories260K.gguf" --header-timeout 3 --body-timeout 5 --idle-timeout 5 || exit 1
node "$HERE/server/hostile.mjs" "$PORT" "$SPID"
check "hostile clients: every attack answered, a normal request served during each" $?
stop_server "$SPID"
check "the server exits 0 on SIGTERM after the suite" $?

start_server cap -m "$M/stories260K.gguf" --max-connections 50 --header-timeout 3 || exit 1
node "$HERE/server/hostile.mjs" "$PORT" "$SPID" --only connection-cap --cap 50
check "the connection cap holds, a normal request still served" $?
stop_server "$SPID"
check "the capped server exits 0 on SIGTERM" $?
finish hostile
