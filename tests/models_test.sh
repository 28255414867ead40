#!/usr/bin/env bash
# `paddock serve --models-dir`: several models on one memory budget (server/model_host.h).
#   - each model's greedy text through the many-model server equals its single-model server's;
#   - three models whose sum exceeds the budget, requests alternating: resident memory (sampled
#     every 100 ms) never above the budget plus the stated margin, evictions and reloads in
#     /metrics, no request failed; requests for a model while it is being evicted are served;
#   - two models decoding at once each give the text they give alone;
#   - keep_alive (Ollama's: 0 unloads, a duration expires), /api/tags, /api/ps, /api/pull;
#   - bad input: a non-GGUF file and an adapter in the directory are left out by name, two files
#     with one id, a models.json key that does not exist, a budget smaller than a model, -m
#     over its budget.
# usage: models_test.sh PADDOCK_BIN
set -uo pipefail
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"

D=$TMP/models
mkdir -p "$D/sub"
cp "$M/stories260K.gguf" "$D/stories.gguf"
"$BIN" synth --shape tiny --type q8_0 --seed 3 -o "$D/sub/tiny.gguf" >/dev/null 2>&1
"$BIN" synth --lora-for "$M/stories260K.gguf" --rank 8 -o "$D/tale.gguf" 2>/dev/null
echo "notes" >"$D/README.txt"
echo "not a model" >"$D/broken.gguf"
cat >"$D/models.json" <<EOF
{"models": {"storyteller": {"file": "stories.gguf", "aliases": ["gpt-4o-mini"],
                            "loras": {"tale": "tale.gguf"}}}}
EOF

# --- the registry: ids, aliases, adapters, what is left out
start_server many --models-dir "$D" || exit 1
grep -q "left out $D/README.txt: not a .gguf file" "$TMP/many.log" &&
  grep -q "left out $D/broken.gguf: not a model" "$TMP/many.log" &&
  ! grep -q "left out $D/tale.gguf" "$TMP/many.log"  # (an adapter models.json names)
check "a non-GGUF file and a broken .gguf are left out by name" $?
curl -s "http://127.0.0.1:$PORT/v1/models" | json_get '[(m["id"], m["status"]["value"], m.get("parent")) for m in d["data"]] == [("storyteller","unloaded",None),("gpt-4o-mini","unloaded",None),("tale","unloaded","storyteller"),("tiny","unloaded",None)]' | grep -q True
check "/v1/models lists every model, alias and adapter, unloaded" $?

# --- correctness: each model's text equals its single-model server's
many_story=$(complete storyteller "Once upon a time" 24)
many_tiny=$(complete tiny "hello" 12)
many_alias=$(complete gpt-4o-mini "Once upon a time" 24)
many_tale=$(complete tale "Once upon a time" 24)
MANY_PORT=$PORT
start_server single1 -m "$M/stories260K.gguf" || exit 1
one_story=$(complete stories260K "Once upon a time" 24)
kill "$SPID"
start_server single2 -m "$D/sub/tiny.gguf" || exit 1
one_tiny=$(complete tiny "hello" 12)
kill "$SPID"
want_tale=$("$BIN" run -m "$M/stories260K.gguf" --lora "$D/tale.gguf" -p "Once upon a time" -n 24 --temp 0 2>/dev/null)
PORT=$MANY_PORT
[ -n "$one_story" ] && [ "$many_story" = "$one_story" ] && [ "$many_alias" = "$one_story" ] &&
  [ "$many_tiny" = "$one_tiny" ] && [ "Once upon a time$many_tale" = "$want_tale" ] &&
  [ "$many_tale" != "$many_story" ]
check "each model's greedy text equals its single-model server's (alias and models.json adapter too)" $?
expect_http "an unknown model is a 404 naming the served ones" /v1/completions '{"model":"gpt-9","prompt":"x"}' \
  404 "'storyteller', 'gpt-4o-mini', 'tale' (an adapter), 'tiny'"
expect_http "no model among several is a 400" /v1/completions '{"prompt":"x"}' 400 "'model' is required"

# --- two models decoding at once: each text as alone
a_pid=() ; for i in 1 2 3; do complete storyteller "Once upon a time" 24 >"$TMP/both.s$i" & a_pid+=($!); complete tiny "hello" 12 >"$TMP/both.t$i" & a_pid+=($!); done
wait "${a_pid[@]}"
ok=0
for i in 1 2 3; do
  [ "$(cat "$TMP/both.s$i")" = "$one_story" ] && [ "$(cat "$TMP/both.t$i")" = "$one_tiny" ] || ok=1
done
check "two models decoding at once: each text as alone" $ok
# (the page read whole first: grep -q would close the pipe early, failing curl under pipefail)
m=$(curl -s "http://127.0.0.1:$PORT/metrics")
grep -q '^vllm:generation_tokens_total{model_name="tiny"} ' <<<"$m" &&
  grep -q '^vllm:generation_tokens_total{model_name="storyteller"} ' <<<"$m"
check "per-model metrics carry model_name" $?

# --- Ollama's model management
curl -s "http://127.0.0.1:$PORT/api/tags" | json_get 'sorted(m["name"] for m in d["models"])==["storyteller","tiny"]' | grep -q True
check "/api/tags lists every model" $?
curl -s "http://127.0.0.1:$PORT/api/ps" | json_get 'sorted(m["name"] for m in d["models"])==["storyteller","tiny"] and all(m["size"]>0 for m in d["models"])' | grep -q True
check "/api/ps lists the loaded models with their memory" $?
r=$(post /api/generate '{"model":"tiny","keep_alive":0}')
[ "${r%% *}" = 200 ] && echo "${r#* }" | json_get 'd["done_reason"]' | grep -qx unload
unloaded=1
for _ in $(seq 1 100); do
  curl -s "http://127.0.0.1:$PORT/api/ps" | json_get '[m["name"] for m in d["models"]]==["storyteller"]' | grep -q True && { unloaded=0; break; }
  sleep 0.1
done
[ $unloaded = 0 ] && [ "$(metric paddock_model_expiries_total tiny)" = 1 ]
check "/api/generate without a prompt and keep_alive 0 unloads the model" $?
r=$(post /api/chat '{"model":"tiny","messages":[]}')
[ "${r%% *}" = 200 ] && echo "${r#* }" | json_get 'd["done_reason"]' | grep -qx load &&
  [ "$(metric paddock_model_loaded tiny)" = 1 ]
check "/api/chat without messages loads the model" $?
r=$(post /api/generate '{"model":"tiny","prompt":"hello","keep_alive":"300ms","options":{"num_predict":2}}')
expired=1
for _ in $(seq 1 100); do
  [ "$(metric paddock_model_expiries_total tiny)" = 2 ] && { expired=0; break; }
  sleep 0.1
done
[ "${r%% *}" = 200 ] && [ $expired = 0 ]
check "a request's keep_alive (300ms) unloads the idle model when it runs out" $?
expect_http "a keep_alive that is not a duration is a 400" /api/generate \
  '{"model":"tiny","prompt":"x","keep_alive":"5 minutes"}' 400 keep_alive
expect_http "/api/pull answers that downloading is not available" /api/pull '{"model":"llama3"}' 501 \
  "downloading models is not available"
kill "$SPID" 2>/dev/null

# --- memory: three models whose sum exceeds the budget, requests alternating
B=$TMP/big
mkdir -p "$B"
# (Under a sanitizer, where resident memory is not the program's: the same shape as the tiny
# model, so that loads stay quick; the eviction logic is the same.)
shape=(--shape tinyllama --layers 2)
[ -n "${PADDOCK_SANITIZED:-}" ] && shape=(--shape tiny)
for s in 1 2 3; do
  "$BIN" synth "${shape[@]}" --type q8_0 --seed $s -o "$B/tl$s.gguf" >/dev/null 2>&1
done
"$BIN" serve --models-dir "$B" --port 0 2>"$TMP/probe.log" &
probe=$!
for _ in $(seq 1 300); do grep -q "model 'tl3'" "$TMP/probe.log" && break; sleep 0.1; done
kill "$probe"; wait "$probe" 2>/dev/null
# The estimate of one (weights + KV + scratch, MiB): the budget holds two, not three.
one=$(sed -n "s/.*model 'tl1'.*weights \([0-9.]*\) \([KM]\)iB, KV \([0-9.]*\) \([KM]\)iB, scratch \([0-9.]*\) \([KM]\)iB.*/\1 \2 \3 \4 \5 \6/p" "$TMP/probe.log" |
  awk '{k=0; for (i=1;i<=5;i+=2) k+=$i*($(i+1)=="M"?1024:1); printf "%d", k+1}')
budget=$((one * 2 + one / 2))  # KiB
start_server mem --models-dir "$B" --memory-budget "${budget}K" || exit 1
base_kb=$(awk '/VmRSS/{print $2}' "/proc/$SPID/status")
( while kill -0 "$SPID" 2>/dev/null; do awk '/VmRSS/{print $2}' "/proc/$SPID/status" 2>/dev/null; sleep 0.1; done ) >"$TMP/rss.txt" &
sampler=$!
failed=0
declare -A first
for round in 1 2 3; do
  for m in tl1 tl2 tl3; do
    t=$(complete "$m" "Once upon a time" 8) || failed=1
    [ -n "$t" ] || failed=1
    if [ "$round" = 1 ]; then first[$m]=$t; elif [ "${first[$m]}" != "$t" ]; then failed=1; fi
  done
done
# A request for a model while it is being evicted: tl1 is the least recently used; a request
# for it races the load of tl3 that evicts it.
complete tl2 "Once upon a time" 8 >/dev/null
complete tl3 "Once upon a time" 8 >"$TMP/race.3" &
r3=$!
complete tl1 "Once upon a time" 8 >"$TMP/race.1"
wait "$r3"
[ "$(cat "$TMP/race.1")" = "${first[tl1]}" ] && [ "$(cat "$TMP/race.3")" = "${first[tl3]}" ] || failed=1
kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
peak_kb=$(sort -n "$TMP/rss.txt" | tail -n 1)
evictions=0 loads=0
for m in tl1 tl2 tl3; do
  evictions=$((evictions + $(metric paddock_model_evictions_total $m)))
  loads=$((loads + $(metric paddock_model_loads_total $m)))
done
margin_kb=$((64 * 1024))  # the stated margin: allocator slack and a tensor being re-laid out
echo "  budget $((budget / 1024)) MiB, resident at start $((base_kb / 1024)) MiB, peak $((peak_kb / 1024)) MiB over $(wc -l <"$TMP/rss.txt") samples; $loads loads, $evictions evictions"
[ $failed = 0 ]
check "three models over the budget, requests alternating: every text as the first time (none failed)" $?
[ "$evictions" -ge 6 ] && [ "$loads" -ge 9 ]
check "evictions and reloads are counted in /metrics" $?
if [ -n "${PADDOCK_SANITIZED:-}" ]; then
  echo "skip resident memory bound (a sanitizer's shadow memory is not the program's)"
else
  [ "$peak_kb" -le $((base_kb + budget + margin_kb)) ]
  check "resident memory never above the budget + 64 MiB (sampled every 100 ms)" $?
fi
kill "$SPID"

# --- bad input
cp "$D/sub/tiny.gguf" "$D/tiny.gguf"  # a second file with the id 'tiny'
"$BIN" serve --models-dir "$D" --port 0 >/dev/null 2>"$TMP/dup.log"
[ $? = 1 ] && grep -q "two models have the id 'tiny': $D/sub/tiny.gguf and $D/tiny.gguf" "$TMP/dup.log" ||
  grep -q "two models have the id 'tiny': $D/tiny.gguf and $D/sub/tiny.gguf" "$TMP/dup.log"
check "two files with one id: an error naming both" $?
rm "$D/tiny.gguf"
echo '{"models": {"x": {"file": "stories.gguf", "contxt": 512}}}' >"$D/models.json"
"$BIN" serve --models-dir "$D" --port 0 >/dev/null 2>"$TMP/key.log"
[ $? = 1 ] && grep -q "unknown key 'contxt'" "$TMP/key.log"
check "a models.json key that does not exist is an error naming it" $?
rm "$D/models.json"
start_server small --models-dir "$D" --memory-budget 3M || exit 1
r=$(post /v1/completions '{"model":"stories","prompt":"x","max_tokens":2}')
t=$(complete tiny "hello" 12)
[ "${r%% *}" = 507 ] && echo "${r#* }" | grep -q "more than the memory budget of 3.00 MiB" && [ "$t" = "$one_tiny" ]
check "a model larger than the budget is refused saying by how much; a smaller one serves" $?
kill "$SPID"
"$BIN" serve -m "$M/stories260K.gguf" --memory-budget 2M --port 0 >/dev/null 2>"$TMP/pin.log"
[ $? = 1 ] && grep -q "more than the memory budget of 2.00 MiB" "$TMP/pin.log"
check "-m with a budget smaller than the model: an error saying by how much" $?

finish models
