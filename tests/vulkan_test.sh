#!/usr/bin/env bash
# The Vulkan backend through the command line and the server (issue: Paddock on a GPU), on the
# machine's Vulkan device (lavapipe in CI):
#  - paddock info --devices lists the CPU and the device;
#  - run and serve with --device vulkan give the CPU's greedy text; 8 requests at once each
#    their text alone; n = 2 choices forked (copy-on-write); the KV disk tier across a restart;
#    /metrics reports the device's memory; --gpu-layers within a small budget; tune --device;
#  - no device (the loader pointed at no driver), an unknown device, a model over the device's
#    budget: a clear error each, exit 1 or 2, nothing half-started;
#  - a device lost mid-step (PADDOCK_VULKAN_LOSE_AFTER, the fault switch): the request ends
#    with an error, the next one at once, /health answers 503 naming the device; nothing hangs.
# usage: vulkan_test.sh PADDOCK_BINARY
set -u
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
source "$HERE/lib.sh"
MODEL=$M/stories260K.gguf

"$BIN" info --devices >"$TMP/devices.txt" 2>&1
grep -q '^cpu ' "$TMP/devices.txt" && grep -q '^vulkan:0 ' "$TMP/devices.txt"
check "info --devices lists the CPU and vulkan:0" $?

cpu_text=$("$BIN" run -m "$MODEL" -p "Once upon a time" -n 48 --temp 0 2>/dev/null)
vk_text=$("$BIN" run -m "$MODEL" -p "Once upon a time" -n 48 --temp 0 --device vulkan 2>"$TMP/run.log")
[ -n "$cpu_text" ] && [ "$cpu_text" = "$vk_text" ] && grep -q "on vulkan:0" "$TMP/run.log"
check "run --device vulkan: the CPU's greedy text" $?
spec_text=$("$BIN" run -m "$MODEL" -p "Once upon a time" -n 48 --temp 0 --device vulkan --spec ngram 2>/dev/null)
[ "$spec_text" = "$cpu_text" ]
check "speculative decoding (ngram) on the device: the same text" $?

# expect_fail NAME RC NEEDLE ARGS...: exits with RC, stderr names NEEDLE.
expect_fail() {
  local name=$1 rc=$2 needle=$3
  shift 3
  "$@" >/dev/null 2>"$TMP/err.txt"
  local got=$?
  [ "$got" -eq "$rc" ] && grep -q -- "$needle" "$TMP/err.txt"
  check "$name" $? "exit $got (want $rc): $(head -c 200 "$TMP/err.txt") (want '$needle')"
}
expect_fail "no Vulkan device: says how to get one" 1 "mesa-vulkan-drivers" \
  env VK_ICD_FILENAMES=/nonexistent "$BIN" run -m "$MODEL" -n 4 --device vulkan
expect_fail "an unknown device" 2 "unknown device 'gpu'" "$BIN" run -m "$MODEL" -n 4 --device gpu
expect_fail "a model over the device budget names the sizes" 1 "exceed the Vulkan device's 97.66 KiB" \
  "$BIN" run -m "$MODEL" -n 4 --device vulkan --device-memory 100000
expect_fail "every layer asked of a device too small: the --gpu-layers that fits" 1 \
  "exceed the Vulkan device's 700.00 KiB.*--gpu-layers 3 fits" \
  "$BIN" run -m "$MODEL" -n 4 --device vulkan --device-memory 700K
part_text=$("$BIN" run -m "$MODEL" -p "Once upon a time" -n 48 --temp 0 --device vulkan \
  --device-memory 700K --gpu-layers 3 2>/dev/null)
[ "$part_text" = "$cpu_text" ]
check "--gpu-layers 3 within the budget: the CPU's greedy text" $?
expect_fail "--gpu-layers past the model's layers" 1 "the model has 5 layers" \
  "$BIN" run -m "$MODEL" -n 4 --device vulkan --gpu-layers 9

# tune --device: each matrix-vector workgroup measured; the choice stored for this device and
# shape, and read back by run (PADDOCK_CACHE_DIR is this test's own: lib.sh).
"$BIN" tune -m "$MODEL" --device vulkan -r 1 >"$TMP/tune.txt" 2>"$TMP/tune.err"
grep -q "workgroup   64:" "$TMP/tune.txt" && grep -q "^chosen: workgroup" "$TMP/tune.txt" &&
  grep -q "tune-device.tsv" "$TMP/tune.err"
check "tune --device vulkan measures the workgroups and stores its choice" $?
tuned_text=$("$BIN" run -m "$MODEL" -p "Once upon a time" -n 48 --temp 0 --device vulkan 2>"$TMP/tuned.err")
grep -q "tuned for this device: matrix-vector workgroup" "$TMP/tuned.err" && [ "$tuned_text" = "$cpu_text" ]
check "run on the device reads the tuned workgroup; the same text" $?
expect_fail "tune --device cpu" 2 "for a Vulkan device" "$BIN" tune -m "$MODEL" --device cpu
expect_fail "--device-memory without a device" 2 "for --device vulkan" \
  "$BIN" run -m "$MODEL" -n 4 --device-memory 1G

start_server cpu -m "$MODEL" || exit 1
cpu_body=$(complete "" "Once upon a time" 24)
# Eight prompts, each alone on the CPU server and then all at once on the device's.
PROMPTS=("Once upon a time" "Lily and Tom went to the park" "The sun was hot." "A little dog"
  "Mom said" "One day, a big bird flew over the tree and saw a cat." "Tim had" "The cat and the dog")
ask() {  # ask PORT PROMPT [N]: the choices' texts, one per line
  curl -s "http://127.0.0.1:$1/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"prompt\":\"$2\",\"max_tokens\":32,\"temperature\":0,\"n\":${3:-1}}" |
    python3 -c 'import json,sys; [print(json.dumps(c["text"])) for c in json.load(sys.stdin)["choices"]]'
}
for i in "${!PROMPTS[@]}"; do ask "$PORT" "${PROMPTS[$i]}" >"$TMP/cpu.$i"; done
stop_server "$SPID"
start_server vk -m "$MODEL" --device vulkan --kv-disk "$TMP/kv" || exit 1
vk_body=$(complete "" "Once upon a time" 24)
[ -n "$cpu_body" ]
check "the CPU server's completion" $?
expect_eq "serve --device vulkan: the CPU server's completion" "$vk_body" "$cpu_body"
pids=()
for i in "${!PROMPTS[@]}"; do
  ask "$PORT" "${PROMPTS[$i]}" >"$TMP/vk.$i" &
  pids+=($!)
done
wait "${pids[@]}"
same=0
for i in "${!PROMPTS[@]}"; do cmp -s "$TMP/cpu.$i" "$TMP/vk.$i" && same=$((same + 1)); done
expect_eq "8 requests at once on the device: each the CPU's text alone (of 8)" "$same" 8
# n = 2 greedy choices share the prompt's blocks (copy-on-write of the last, partial block).
ask "$PORT" "${PROMPTS[5]}" 2 >"$TMP/vk.n2"
[ "$(sed -n 1p "$TMP/vk.n2")" = "$(cat "$TMP/cpu.5")" ] && [ "$(sed -n 2p "$TMP/vk.n2")" = "$(cat "$TMP/cpu.5")" ]
check "n = 2 choices forked on the device: both the CPU's text" $?
curl -s "http://127.0.0.1:$PORT/metrics" >"$TMP/metrics.txt"
grep -q 'paddock_device_memory_bytes{model_name="stories260K",kind="allocated"} [1-9]' "$TMP/metrics.txt" &&
  grep -q 'paddock_device_memory_bytes{model_name="stories260K",kind="total"} [1-9]' "$TMP/metrics.txt"
check "/metrics: the device's memory, allocated and total" $? "$(grep device_memory "$TMP/metrics.txt")"
stop_server "$SPID"
# The KV disk tier through the device's store: after a restart, the prompt's blocks come back
# from disk into device memory, and the text is the same.
long=""
for j in 1 2 3 4 5 6; do long+="Once upon a time, in a town number $j, a little girl found a red ball. "; done
start_server vk2 -m "$MODEL" --device vulkan --kv-disk "$TMP/kv" || exit 1
first_long=$(ask "$PORT" "$long")
stop_server "$SPID"
start_server vk3 -m "$MODEL" --device vulkan --kv-disk "$TMP/kv" || exit 1
again_long=$(ask "$PORT" "$long")
hits=$(metric paddock_kv_disk_hits_total)
[ -n "$first_long" ] && [ "${hits%.*}" -ge 4 ]
check "the KV disk tier on the device: blocks read back after a restart" $? "$hits hits (want 4 or more)"
expect_eq "the same text after the restart" "$again_long" "$first_long"
stop_server "$SPID"

# A device lost at its 4th submission: mid-generation of the first request.
PADDOCK_VULKAN_LOSE_AFTER=4 start_server lost -m "$MODEL" --device vulkan || exit 1
# The request in flight when the device goes: not streamed, its status waited for its end, so
# it is a 503 with Retry-After naming the fault (never a 200 with an error in the body).
code=$(timeout 30 curl -s -D "$TMP/first.h" -o "$TMP/first.b" -w '%{http_code}' \
  "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"Once upon a time","max_tokens":24,"temperature":0}')
first=$(cat "$TMP/first.b")
[ "$code" = 503 ] && grep -qi '^retry-after:' "$TMP/first.h" &&
  echo "$first" | grep -q '"engine_failure"' && echo "$first" | grep -q 'device lost'
check "a device lost mid-step: the request in flight answers 503 with Retry-After" $? "$code $first"
second=$(timeout 30 curl -s "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"Tom","max_tokens":8,"temperature":0}')
echo "$second" | grep -q 'was lost'
check "after the loss: the next request ends with the error at once" $? "$second"
health=$(curl -s -w ' %{http_code}' "http://127.0.0.1:$PORT/health")
echo "$health" | grep -q ' 503$' && echo "$health" | grep -q 'was lost'
check "after the loss: /health answers 503 naming the device" $? "$health"
# Every API shape answers a 503 with Retry-After (clients and balancers count it as a failure),
# and /metrics says the backend is down.
for route in "/v1/completions {\"prompt\":\"Tom\",\"max_tokens\":4}" \
  "/v1/chat/completions {\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4}" \
  "/v1/responses {\"input\":\"hi\",\"max_output_tokens\":4}" \
  "/api/generate {\"model\":\"stories260K\",\"prompt\":\"hi\",\"stream\":false}" \
  "/v1/embeddings {\"input\":\"hi\"}" \
  "/v1/messages {\"model\":\"stories260K\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"; do
  path=${route%% *}
  got=$(curl -s -D "$TMP/lost.h" -o "$TMP/lost.b" -w '%{http_code}' "http://127.0.0.1:$PORT$path" \
    -H 'Content-Type: application/json' -d "${route#* }")
  [ "$got" = 503 ] && grep -qi '^retry-after:' "$TMP/lost.h"
  check "after the loss: $path answers 503 with Retry-After" $? "$got $(head -c 200 "$TMP/lost.b")"
done
expect_eq "after the loss: /metrics paddock_backend_up is 0" "$(metric paddock_backend_up)" 0
stop_server "$SPID"
check "the server stops on SIGTERM after the loss" $?
# The request in flight on every API shape: a 503 with Retry-After in the shape's own error.
for route in "/v1/chat/completions {\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":24,\"temperature\":0}" \
  "/v1/responses {\"input\":\"hi\",\"max_output_tokens\":24}" \
  "/api/generate {\"model\":\"stories260K\",\"prompt\":\"hi\",\"stream\":false,\"options\":{\"num_predict\":24}}" \
  "/v1/messages {\"model\":\"stories260K\",\"max_tokens\":24,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"; do
  path=${route%% *}
  PADDOCK_VULKAN_LOSE_AFTER=4 start_server lost2 -m "$MODEL" --device vulkan || exit 1
  got=$(timeout 30 curl -s -D "$TMP/lost.h" -o "$TMP/lost.b" -w '%{http_code}' \
    "http://127.0.0.1:$PORT$path" -H 'Content-Type: application/json' -d "${route#* }")
  [ "$got" = 503 ] && grep -qi '^retry-after:' "$TMP/lost.h" && grep -q 'device lost' "$TMP/lost.b"
  check "in flight when the device goes: $path answers 503 with Retry-After" $? \
    "$got $(head -c 200 "$TMP/lost.b")"
  stop_server "$SPID"
done

finish vulkan
