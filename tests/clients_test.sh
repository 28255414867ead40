#!/usr/bin/env bash
# Real client libraries against `paddock serve` (stories260K): the OpenAI client (chat and
# Responses), Anthropic's SDK, Ollama's, the Vercel AI SDK, LangChain and the OpenAI client's v4
# (tests/clients/clients.mjs), each with a multi-turn conversation, streaming, a tool round trip
# and structured output; and the JSON-Schema-Test-Suite's schemas as structured output
# (tests/clients/schema_suite.mjs). The server requires
# a key, so each client's way of sending one (Authorization: Bearer, x-api-key) is exercised too.
# usage: clients_test.sh PADDOCK_BIN
set -uo pipefail
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"

for d in "$HERE/clients" "$HERE/clients/openai4"; do
  [ -f "$d/node_modules/.package-lock.json" ] || (cd "$d" && npm ci --no-audit --no-fund --loglevel=error >/dev/null 2>&1)
done
start_server clients -m "$M/stories260K.gguf" --served-model-name stories260K --api-key sekret || exit 1
node "$HERE/clients/clients.mjs" "$PORT" stories260K
check "client libraries hold conversations unchanged" $?
# The JSON-Schema-Test-Suite's schemas: what is accepted validates, what is refused is named.
samples=4
[ "${PADDOCK_SANITIZED:-0}" = 1 ] && samples=1
node "$HERE/clients/schema_suite.mjs" "$PORT" stories260K "$samples" | grep -v '^ok'
check "JSON-Schema-Test-Suite: every output of an accepted schema validates, every refusal named" "${PIPESTATUS[0]}"
# Retrieval on one server: a chat model, a BERT embedding model and a BERT reranker in one
# --models-dir (tests/clients/retrieval.mjs).
R=$TMP/retrieval
mkdir -p "$R"
ln -s "$(cd "$M" && pwd)/stories260K.gguf" "$R/stories.gguf"
"$BIN" synth --shape tiny-bert -o "$R/embedder.gguf" 2>/dev/null &&
  "$BIN" synth --shape tiny-reranker -o "$R/reranker.gguf" 2>/dev/null
check "synthetic encoder files written" $?
start_server retrieval --models-dir "$R" || exit 1
node "$HERE/clients/retrieval.mjs" "$PORT" stories embedder reranker
check "retrieval: embeddings and rerank through the clients, bad input named" $?
# A query too long for any document, with truncate: the query is named (not a document), and
# truncate is not suggested.
long_q=$(python3 -c 'print(" ".join(["capital"] * 400))')
r=$(post /v1/rerank "{\"model\":\"reranker\",\"query\":\"$long_q\",\"documents\":[\"a\",\"b\"],\"truncate\":true}")
[ "${r%% *}" = 400 ] && echo "${r#* }" | json_get 'd["error"]["param"]' | grep -qx query &&
  ! echo "${r#* }" | grep -q "truncate: true"
check "rerank: a query with no room for a document is named, truncate not suggested" $? "$(echo "$r" | head -c 300)"
finish clients
