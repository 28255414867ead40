#!/usr/bin/env bash
# Real client libraries against `paddock serve` (stories260K): Anthropic's SDK, Ollama's, the
# Vercel AI SDK, LangChain and the OpenAI client's v4 (tests/clients/clients.mjs), each with a
# multi-turn conversation, streaming, a tool round trip and structured output. The server requires
# a key, so each client's way of sending one (Authorization: Bearer, x-api-key) is exercised too.
# usage: clients_test.sh PADDOCK_BIN
set -uo pipefail
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/server_lib.sh"
pass=0
fail=0

for d in "$HERE/clients" "$HERE/clients/openai4"; do
  [ -f "$d/node_modules/.package-lock.json" ] || (cd "$d" && npm ci --no-audit --no-fund --loglevel=error >/dev/null 2>&1)
done
start_server clients -m "$M/stories260K.gguf" --served-model-name stories260K --api-key sekret || exit 1
node "$HERE/clients/clients.mjs" "$PORT" stories260K
check "client libraries hold conversations unchanged" $?
echo "clients: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
